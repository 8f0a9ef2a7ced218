-- Buffer settings for QVR files: comments, indentation width, formatting.
-- Starting the language server is opt-in: require('qvr').setup() (see README.md).
if vim.b.did_ftplugin then
  return
end
vim.b.did_ftplugin = 1

local bo = vim.bo
bo.commentstring = '# %s'
-- `##` and `#!` are doc comments, `#` a line comment (`#[` is a pragma, never a leader).
bo.comments = ':##,:#!,:#'
bo.expandtab = true
bo.shiftwidth = 4
bo.softtabstop = 4
-- Wrap comments, continue the comment leader on Enter/o, never wrap code.
bo.formatoptions = bo.formatoptions:gsub('[tro]', '') .. 'cqjro'
bo.suffixesadd = '.qvr'

vim.b.undo_ftplugin = 'setlocal commentstring< comments< expandtab< shiftwidth< softtabstop<'
  .. ' formatoptions< suffixesadd<'

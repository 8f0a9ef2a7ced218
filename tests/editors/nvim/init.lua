-- Minimal Neovim config for the editor tests: the plugin from this repository
-- (editors/nvim) and nothing from the user's configuration.
local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h')
local plugin = vim.fn.fnamemodify(here .. '/../../../editors/nvim', ':p')
vim.opt.runtimepath:prepend(plugin)
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
vim.cmd('filetype plugin indent on')
vim.cmd('syntax on')

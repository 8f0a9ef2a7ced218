-- Types a small module into the (new, empty) buffer from the command line, the way a
-- user would, letting 'indentexpr', 'comments' and 'formatoptions' do their work.
local run = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/report.lua')
run(function()
  assert(vim.bo.filetype == 'qvr', 'filetype: ' .. vim.bo.filetype)
  local keys = table.concat({
    'i## A model.<CR>',
    'More documentation.<CR>',
    '<C-u>program p : A -> B<CR>',          -- leave the doc comment
    'sample x <- Normal(0.0, 1.0)<CR>',     -- indented under the header
    'marginalize z <- Bernoulli(0.5)<CR>',
    'observe y <- Normal(x, 1.0)<CR>',       -- indented under marginalize
    '<C-d>return x<CR>',                     -- end of the marginalize block: dedent by hand
    'morphism probe : A -> B [<CR>',         -- back at column 1 after return
    'role=embed,<CR>',                        -- inside the open bracket
    ']<CR>',                                  -- lines up with the opener
    'object Next : FinSet 2<Esc>',
  })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), 'xt', false)
  return { lines = vim.api.nvim_buf_get_lines(0, 0, -1, false) }
end)

-- Dumps, for every file on the command line, what the plugin sets up without a language
-- server: buffer options, the syntax group of every character, and the indentation of
-- each line next to what GetQvrIndent() computes for it.
local run = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/report.lua')

local links = {}

-- The standard group a syntax group links to (`:highlight qvrX` says "links to Y").
local function link_of(name)
  if name ~= '' and links[name] == nil then
    links[name] = vim.fn.execute('highlight ' .. name):match('links to (%w+)') or ''
  end
  return links[name] or ''
end

local function dump(buf)
  local lines = {}
  for lnum, text in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    local groups = {}
    for col = 1, #text do
      local name = vim.fn.synIDattr(vim.fn.synID(lnum, col, 1), 'name')
      groups[col] = { name, link_of(name) }
    end
    lines[lnum] = { text = text, groups = groups, indent = vim.fn.indent(lnum), computed = vim.fn.GetQvrIndent(lnum) }
  end
  return {
    name = vim.api.nvim_buf_get_name(buf),
    filetype = vim.bo.filetype,
    syntax = vim.bo.syntax,
    commentstring = vim.bo.commentstring,
    comments = vim.bo.comments,
    shiftwidth = vim.bo.shiftwidth,
    expandtab = vim.bo.expandtab,
    indentexpr = vim.bo.indentexpr,
    lines = lines,
  }
end

run(function()
  local buffers = {}
  for _, file in ipairs(vim.fn.argv()) do
    vim.cmd('edit ' .. vim.fn.fnameescape(file))
    table.insert(buffers, dump(vim.api.nvim_get_current_buf()))
  end
  return { buffers = buffers }
end)

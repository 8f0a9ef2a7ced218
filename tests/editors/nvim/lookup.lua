-- How require('qvr') finds the project root and the server. $QVR_CASES is JSON:
-- {"name": {"file": "/path/to/m.qvr", "path": "PATH for the lookup"}, ...}.
-- Then starts the server for the buffer on the command line with PATH = the "bare"
-- case's, which must fail with one warning.
local run = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/report.lua')
run(function()
  local qvr = require('qvr')
  local cases = {}
  for name, case in pairs(vim.fn.json_decode(vim.env.QVR_CASES)) do
    vim.env.PATH = case.path
    local root = qvr.find_root(case.file)
    cases[name] = { root = root, server = qvr.find_server(root) }
  end
  local notes = {}
  vim.notify = function(msg) table.insert(notes, msg) end
  vim.env.PATH = vim.fn.json_decode(vim.env.QVR_CASES).bare.path
  local started = qvr.start(vim.api.nvim_get_current_buf())
  qvr.start(vim.api.nvim_get_current_buf()) -- a second attempt does not warn again
  vim.wait(200, function() return false end) -- let the scheduled notification run
  return { cases = cases, notes = notes, started = started }
end)

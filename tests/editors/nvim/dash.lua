-- :QvrDash after require('qvr').setup(), for the buffer loaded on the command line (a
-- .qvr file in a project whose .venv/bin/qvr is a fake that writes its working folder
-- and arguments, one a line, to $QVR_ARGS_OUT). Reports:
--   command    whether :QvrDash exists, and its completions;
--   builder    M.dash_cmd for each method, none, and an unknown one;
--   started    `:QvrDash nuts` run for real: the fake's output, the windows, the buffer;
--   captured   `:QvrDash` (no method) with termopen stubbed: its command and options;
--   errors     what the user is told for an unknown method, a non-qvr buffer, no qvr.
local run = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/report.lua')
run(function()
  local qvr = require('qvr')
  local notes = {}
  vim.notify = function(msg) table.insert(notes, msg) end
  qvr.setup()
  local model = vim.api.nvim_get_current_buf()
  local file = vim.api.nvim_buf_get_name(model)
  local report = {
    command = {
      exists = vim.fn.exists(':QvrDash'),
      all = vim.fn.getcompletion('QvrDash ', 'cmdline'),
      n = vim.fn.getcompletion('QvrDash n', 'cmdline'),
      s = vim.fn.getcompletion('QvrDash s', 'cmdline'),
    },
    builder = {
      nuts = qvr.dash_cmd('/path/qvr', '/path/file.qvr', 'nuts'),
      none = qvr.dash_cmd('/path/qvr', '/path/file.qvr'),
      empty = qvr.dash_cmd('/path/qvr', '/path/file.qvr', ''),
      list = qvr.dash_cmd({ 'python3', '-m', 'qvr' }, '/a b/c d.qvr', 'smc'),
    },
    file = file,
  }
  local cmd, message = qvr.dash_cmd('/path/qvr', '/path/file.qvr', 'mcmc')
  report.builder.unknown = { cmd = cmd == nil and vim.NIL or cmd, message = message }
  for _, method in ipairs(qvr.methods) do
    report.builder[method] = qvr.dash_cmd('/path/qvr', '/path/file.qvr', method)
  end

  -- for real: a terminal split running the fake qvr
  vim.api.nvim_buf_set_lines(model, -1, -1, false, { '# an unsaved edit' })
  vim.cmd('QvrDash nuts')
  local out = vim.env.QVR_ARGS_OUT
  local done = vim.wait(10000, function() return vim.fn.filereadable(out) == 1 end, 20)
  assert(done, 'the fake qvr wrote nothing; notes: ' .. vim.inspect(notes))
  report.started = {
    lines = vim.fn.readfile(out),
    windows = #vim.api.nvim_tabpage_list_wins(0),
    buftype = vim.bo.buftype,
    model_modified = vim.bo[model].modified,
    model_last_line = vim.fn.readfile(file)[#vim.fn.readfile(file)],
    notes = vim.deepcopy(notes),
  }

  -- with termopen stubbed, from the model's window
  vim.cmd('only')
  vim.api.nvim_set_current_buf(model)
  local captured = {}
  local termopen = vim.fn.termopen
  vim.fn.termopen = function(cmd, opts)
    table.insert(captured, { cmd = cmd, cwd = opts.cwd })
    return 42
  end
  vim.cmd('QvrDash')
  report.captured = captured

  -- what cannot be opened
  vim.cmd('only')
  vim.api.nvim_set_current_buf(model)
  notes = {}
  vim.notify = function(msg) table.insert(notes, msg) end
  vim.cmd('QvrDash mcmc')
  vim.cmd('enew')
  vim.cmd('QvrDash svi') -- no file
  vim.cmd('edit ' .. vim.fn.fnameescape(vim.fn.fnamemodify(file, ':h') .. '/notes.txt'))
  vim.cmd('QvrDash svi') -- not a .qvr file
  vim.api.nvim_set_current_buf(model)
  local saved_path = vim.env.PATH
  qvr.find_qvr = function() return nil end
  vim.cmd('QvrDash svi') -- no qvr anywhere
  vim.env.PATH = saved_path
  vim.fn.termopen = termopen
  report.errors = notes
  report.calls_after_errors = #captured
  report.windows_after_errors = #vim.api.nvim_tabpage_list_wins(0)
  return report
end)

-- Starts qvr-lsp through require('qvr').setup() for the buffer loaded on the command
-- line, waits for its diagnostics, then sends the requests listed in $QVR_REQUESTS
-- (JSON: [{"method": "textDocument/hover", "line": 0, "character": 0}, ...]) and
-- reports the answers.
local run = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/report.lua')
run(function()
  local notes = {}
  vim.notify = function(msg) table.insert(notes, msg) end
  require('qvr').setup()
  local buf = vim.api.nvim_get_current_buf()
  local report = { notes = notes }
  local got = vim.wait(20000, function() return #vim.diagnostic.get(buf) > 0 end, 50)
  local clients = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = buf }) or vim.lsp.buf_get_clients(buf)
  report.clients = {}
  for _, client in pairs(clients) do
    table.insert(report.clients, { name = client.name, cmd = client.config.cmd, root = client.config.root_dir })
  end
  assert(got, 'timed out waiting for diagnostics; notes: ' .. vim.inspect(notes))
  report.diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    table.insert(report.diagnostics, {
      lnum = d.lnum, col = d.col, end_lnum = d.end_lnum, end_col = d.end_col,
      message = d.message, severity = d.severity, code = d.code, source = d.source,
    })
  end
  report.answers = {}
  for _, req in ipairs(vim.fn.json_decode(vim.env.QVR_REQUESTS)) do
    local params = {
      textDocument = { uri = vim.uri_from_bufnr(buf) },
      position = { line = req.line, character = req.character },
    }
    local responses, err = vim.lsp.buf_request_sync(buf, req.method, params, 10000)
    assert(responses, req.method .. ' failed: ' .. tostring(err))
    local answer = vim.NIL
    for _, resp in pairs(responses) do
      assert(not resp.err, req.method .. ' error: ' .. vim.inspect(resp.err))
      answer = resp.result
    end
    table.insert(report.answers, answer)
  end
  return report
end)

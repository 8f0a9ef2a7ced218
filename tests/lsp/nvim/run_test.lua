-- Runs after the file given on the command line is loaded: waits for the server's
-- diagnostics, asks for a hover at ($QVR_HOVER_LINE, $QVR_HOVER_CHAR) (0-based), writes a
-- JSON report to $QVR_RESULT and exits 0 on success, 1 on failure.
local function finish(ok, report)
  report.ok = ok
  vim.fn.writefile({ vim.fn.json_encode(report) }, vim.env.QVR_RESULT or 'result.json')
  vim.cmd((ok and 'qall!') or 'cquit! 1')
end

local ok, err = pcall(function()
  local bufnr = vim.api.nvim_get_current_buf()
  local report = { filetype = vim.bo[bufnr].filetype }
  assert(report.filetype == 'qvr', 'filetype not detected: ' .. report.filetype)

  local got = vim.wait(20000, function() return #vim.diagnostic.get(bufnr) > 0 end, 50)
  assert(got, 'timed out waiting for diagnostics')
  report.diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(report.diagnostics, { lnum = d.lnum, col = d.col, end_col = d.end_col, message = d.message,
                                       severity = d.severity, code = d.code })
  end

  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = tonumber(vim.env.QVR_HOVER_LINE), character = tonumber(vim.env.QVR_HOVER_CHAR) },
  }
  local responses, herr = vim.lsp.buf_request_sync(bufnr, 'textDocument/hover', params, 10000)
  assert(responses, 'hover failed: ' .. tostring(herr))
  for _, resp in pairs(responses) do
    assert(not resp.err, 'hover error: ' .. vim.inspect(resp.err))
    report.hover = resp.result.contents.value
    report.hover_kind = resp.result.contents.kind
  end
  return report
end)

if ok then finish(true, err) else finish(false, { error = tostring(err) }) end

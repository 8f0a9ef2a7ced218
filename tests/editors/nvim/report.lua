-- Shared by the test scripts: run `body` under pcall, write its table (or the
-- error) as JSON to $QVR_RESULT, and quit with status 0 or 1.
return function(body)
  local ok, result = pcall(body)
  local report = ok and result or { error = tostring(result) }
  report.ok = ok
  vim.fn.writefile({ vim.fn.json_encode(report) }, vim.env.QVR_RESULT)
  vim.cmd(ok and 'qall!' or 'cquit! 1')
end

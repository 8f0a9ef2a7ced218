--- Starts the QVR language server `qvr-lsp` for `qvr` buffers with Neovim's built-in
--- LSP client (Neovim 0.7 and newer).
---
---   require('qvr').setup()                        -- defaults
---   require('qvr').setup({ cmd = { 'qvr-lsp' } })  -- a fixed command
---
--- The server is looked up per buffer: `.venv/bin/qvr-lsp` in the project root first,
--- then `qvr-lsp` on PATH. The project root is the nearest ancestor directory of the
--- file that holds one of `root_markers`; without one, the file's own directory.
--- Buffers of the same root share one client.
---
--- `setup()` also defines `:QvrDash [method]`, which opens the training dashboard
--- `qvr dash FILE [--start METHOD]` for the current buffer in a terminal split; `qvr` is
--- found like the server (`.venv/bin/qvr` in the project root, then PATH).
local M = {}

local uv = vim.loop
local is_windows = vim.fn.has('win32') == 1

M.defaults = {
  --- Command list; nil means search (`.venv/bin/qvr-lsp`, then PATH).
  cmd = nil,
  --- Extra arguments appended to the found server.
  args = {},
  --- Files or directories that mark a project root, nearest first.
  root_markers = { '.venv', 'pyproject.toml', '.git' },
  --- Passed through to the client.
  on_attach = nil,
  capabilities = nil,
  settings = nil,
  init_options = nil,
  --- `:QvrDash`: the training dashboard in a terminal split.
  dash = {
    --- Command list that runs `qvr`; nil means search (`.venv/bin/qvr`, then PATH).
    cmd = nil,
    --- The Ex command that opens an empty window for the terminal.
    split = 'botright new',
  },
}

--- The methods `qvr dash --start` accepts, as `:QvrDash` completes them.
M.methods = { 'svi', 'hmc', 'nuts', 'smc' }

M.config = vim.deepcopy(M.defaults)

local warned = {}

local function notify_once(message)
  if not warned[message] then
    warned[message] = true
    vim.schedule(function()
      vim.notify(message, vim.log.levels.WARN, { title = 'qvr' })
    end)
  end
end

local function exists(path)
  return uv.fs_stat(path) ~= nil
end

local function executable(path)
  local stat = uv.fs_stat(path)
  return stat ~= nil and stat.type == 'file' and vim.fn.executable(path) == 1
end

local function join(...)
  return table.concat({ ... }, '/')
end

local function dirname(path)
  return vim.fn.fnamemodify(path, ':h')
end

--- The project root of `path` (a file or directory): the nearest ancestor directory
--- holding one of the root markers, else the directory itself.
function M.find_root(path, markers)
  markers = markers or M.config.root_markers
  local start = vim.fn.fnamemodify(path, ':p')
  if vim.fn.isdirectory(start) == 0 then
    start = dirname(start)
  end
  start = start:gsub('/+$', '')
  if start == '' then
    start = '/'
  end
  local dir = start
  while true do
    for _, marker in ipairs(markers) do
      if exists(join(dir, marker)) then
        return dir
      end
    end
    local parent = dirname(dir)
    if parent == dir then
      return start
    end
    dir = parent
  end
end

--- The path of `name` for `root`: `.venv/bin/NAME` there, else NAME on PATH; nil when
--- neither exists.
local function find_tool(root, name)
  local venv = is_windows and join(root, '.venv', 'Scripts', name .. '.exe') or join(root, '.venv', 'bin', name)
  if executable(venv) then
    return venv
  end
  local on_path = vim.fn.exepath(name)
  if on_path ~= '' then
    return on_path
  end
  return nil
end

--- The path of the server for `root`: `.venv/bin/qvr-lsp` there, else `qvr-lsp` on
--- PATH; nil when neither exists.
function M.find_server(root)
  return find_tool(root, 'qvr-lsp')
end

--- The command that starts the server for `root`, or nil and a message saying what to do.
function M.server_cmd(root)
  if M.config.cmd then
    return vim.list_extend(vim.deepcopy(M.config.cmd), M.config.args)
  end
  local server = M.find_server(root)
  if not server then
    return nil,
      ('qvr: cannot find the language server qvr-lsp (looked in %s/.venv/bin and on PATH). '
        .. 'Install it with `python3 -m venv .venv && .venv/bin/pip install "qvr[lsp]"` '
        .. '(in the qvr repository: `bash scripts/setup.sh`), put qvr-lsp on PATH, or pass '
        .. "cmd to require('qvr').setup(). Highlighting works without it."):format(root)
  end
  return vim.list_extend({ server }, M.config.args)
end

--- The `qvr` command for `root`: `.venv/bin/qvr` there, else `qvr` on PATH; nil when
--- neither exists.
function M.find_qvr(root)
  return find_tool(root, 'qvr')
end

local function is_method(method)
  return vim.tbl_contains(M.methods, method)
end

--- The command list `{QVR, 'dash', FILE[, '--start', METHOD]}`, where QVR is the path
--- of `qvr` or a command list that runs it. Returns nil and a message for an unknown method. Pure: no
--- file-system access, so the tests check it directly.
function M.dash_cmd(qvr, file, method)
  if method ~= nil and method ~= '' and not is_method(method) then
    return nil,
      ('qvr: unknown method `%s` for :QvrDash; use one of %s'):format(method, table.concat(M.methods, ', '))
  end
  local cmd = type(qvr) == 'table' and vim.deepcopy(qvr) or { qvr }
  vim.list_extend(cmd, { 'dash', file })
  if method ~= nil and method ~= '' then
    vim.list_extend(cmd, { '--start', method })
  end
  return cmd
end

local function fail(message)
  vim.notify(message, vim.log.levels.ERROR, { title = 'qvr' })
  return nil
end

--- Opens `qvr dash FILE [--start METHOD]` for the buffer (default: the current one) in a
--- terminal split, started in the project root (where `runs/` goes). A modified buffer
--- is written first: the dashboard reads the file. Returns the terminal's job id, or nil
--- after telling the user why nothing was opened.
function M.dash(method, bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local file = vim.api.nvim_buf_get_name(bufnr)
  if file == '' then
    return fail('qvr: this buffer has no file; :write it to a .qvr file first')
  end
  if vim.bo[bufnr].filetype ~= 'qvr' and not file:match('%.qvr$') then
    return fail(('qvr: %s is not a .qvr file'):format(vim.fn.fnamemodify(file, ':t')))
  end
  file = vim.fn.fnamemodify(file, ':p')
  local root = M.find_root(file)
  local qvr = M.config.dash.cmd or M.find_qvr(root)
  if not qvr then
    return fail(
      ('qvr: cannot find the qvr command for the dashboard (looked in %s/.venv/bin and on PATH). '
        .. 'Install it with `python3 -m venv .venv && .venv/bin/pip install "qvr[tui,runtime]"` '
        .. "(in the qvr repository: `bash scripts/setup.sh`), put qvr on PATH, or pass "
        .. "dash = { cmd = {...} } to require('qvr').setup()."):format(root)
    )
  end
  local cmd, problem = M.dash_cmd(qvr, file, method)
  if not cmd then
    return fail(problem)
  end
  if vim.bo[bufnr].modified then
    vim.api.nvim_buf_call(bufnr, function()
      vim.cmd('silent write')
    end)
  end
  vim.cmd(M.config.dash.split)
  local window = vim.api.nvim_get_current_win()
  -- a list, not a string: each argument reaches qvr as it is, spaces and all
  local ok, job = pcall(vim.fn.termopen, cmd, { cwd = root })
  if not ok or job <= 0 then
    vim.api.nvim_win_close(window, true)
    return fail('qvr: could not start ' .. table.concat(cmd, ' ') .. (ok and '' or (': ' .. tostring(job))))
  end
  vim.cmd('startinsert')
  return job
end

local function complete_method(arglead)
  return vim.tbl_filter(function(method)
    return vim.startswith(method, arglead)
  end, M.methods)
end

local clients = {} -- root -> client id (Neovim 0.7 only; 0.8+ reuses clients itself)

local function client_config(root, cmd)
  return {
    name = 'qvr',
    cmd = cmd,
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = root } },
    on_attach = M.config.on_attach,
    capabilities = M.config.capabilities or vim.lsp.protocol.make_client_capabilities(),
    settings = M.config.settings,
    init_options = M.config.init_options,
  }
end

--- Starts (or reuses) the client for the buffer's project and attaches the buffer.
--- Returns the client id, or nil when the server cannot be found.
function M.start(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local name = vim.api.nvim_buf_get_name(bufnr)
  local root = M.find_root(name ~= '' and name or vim.fn.getcwd())
  local cmd, problem = M.server_cmd(root)
  if not cmd then
    notify_once(problem)
    return nil
  end
  local config = client_config(root, cmd)
  if vim.lsp.start then -- Neovim 0.8+
    return vim.lsp.start(config, { bufnr = bufnr })
  end
  local id = clients[root]
  if id == nil or vim.lsp.get_client_by_id(id) == nil or vim.lsp.client_is_stopped(id) then
    id = vim.lsp.start_client(config)
    if id == nil then
      notify_once('qvr: could not start ' .. table.concat(cmd, ' '))
      return nil
    end
    clients[root] = id
  end
  vim.lsp.buf_attach_client(bufnr, id)
  return id
end

--- Stops every qvr client and starts them again for the loaded qvr buffers.
function M.restart()
  local get_clients = vim.lsp.get_clients or vim.lsp.get_active_clients -- 0.10 renamed it
  for _, client in ipairs(get_clients()) do
    if client.name == 'qvr' then
      vim.lsp.stop_client(client.id)
    end
  end
  clients = {}
  vim.defer_fn(function()
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(bufnr) and vim.bo[bufnr].filetype == 'qvr' then
        M.start(bufnr)
      end
    end
  end, 500)
end

--- Configures the plugin and starts the server for every `qvr` buffer, open or future.
function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  local group = vim.api.nvim_create_augroup('qvr_lsp', { clear = true })
  vim.api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = 'qvr',
    callback = function(args)
      M.start(args.buf)
    end,
  })
  vim.api.nvim_create_user_command('QvrLspRestart', M.restart, { desc = 'Restart the QVR language server' })
  vim.api.nvim_create_user_command('QvrDash', function(args)
    M.dash(args.args)
  end, {
    nargs = '?',
    complete = complete_method,
    desc = 'Open the QVR dashboard (qvr dash FILE [--start METHOD]) in a terminal split',
  })
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.bo[bufnr].filetype == 'qvr' then
      M.start(bufnr)
    end
  end
end

return M

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
}

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

--- The path of the server for `root`: `.venv/bin/qvr-lsp` there, else `qvr-lsp` on
--- PATH; nil when neither exists.
function M.find_server(root)
  local venv = is_windows and join(root, '.venv', 'Scripts', 'qvr-lsp.exe') or join(root, '.venv', 'bin', 'qvr-lsp')
  if executable(venv) then
    return venv
  end
  local on_path = vim.fn.exepath('qvr-lsp')
  if on_path ~= '' then
    return on_path
  end
  return nil
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
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.bo[bufnr].filetype == 'qvr' then
      M.start(bufnr)
    end
  end
end

return M

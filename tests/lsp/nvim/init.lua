-- Minimal Neovim 0.7 config for the headless test: detect *.qvr and attach qvr-lsp.
-- Env: QVR_PYTHON (an interpreter that can import qvr_lsp; PYTHONPATH is inherited).
local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h')
vim.opt.runtimepath:prepend(here .. '/rtp')   -- picks up rtp/ftdetect/qvr.vim
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'

local client_id = nil
vim.api.nvim_create_autocmd('FileType', {
  pattern = 'qvr',
  callback = function(args)
    if client_id == nil then
      -- 0.7 API; vim.lsp.start() only exists from 0.8
      client_id = vim.lsp.start_client({
        name = 'qvr-lsp',
        cmd = { vim.env.QVR_PYTHON or 'python3', '-m', 'qvr_lsp' },
        root_dir = vim.fn.getcwd(),
      })
    end
    vim.lsp.buf_attach_client(args.buf, client_id)
  end,
})

"""Editor integration tests (editors/vscode, editors/nvim); a package so that its module
names do not clash with tests elsewhere (tests/lsp/test_nvim.py)."""

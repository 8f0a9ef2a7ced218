#!/usr/bin/env bash
# Create .venv at the repo root and install qvr with its test tools.
# The CPU build of torch is pinned first so no multi-GB CUDA build is pulled in.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[runtime,lsp,tui,test,lm]"
# Optional: Neovim for the editor tests (tests/editors/test_nvim.py skips without it).
# Only as root with apt; never fails the setup.
if ! command -v nvim >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim; } >/dev/null 2>&1 \
        || echo "setup.sh: neovim not installed; the Neovim editor tests will be skipped" >&2
fi

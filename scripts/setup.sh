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
.venv/bin/python -m pip install -q -e ".[runtime,lsp,test]"

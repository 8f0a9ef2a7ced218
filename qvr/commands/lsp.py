"""`qvr lsp`: run the QVR language server (the `qvr_lsp` package, same as `qvr-lsp`).

LSP over stdio by default, `--tcp [--host H] [--port P]` for debugging.  pygls is
imported only when the command runs, so `qvr check` never pays for it.
"""
from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("lsp", help="run the language server (LSP over stdio, or --tcp)")
    p.add_argument("--stdio", action="store_true", help="speak LSP over stdin/stdout (the default)")
    p.add_argument("--tcp", action="store_true", help="serve over TCP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="TCP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        from qvr_lsp.__main__ import serve
    except ModuleNotFoundError as exc:
        print(f"qvr lsp: the language server is not installed ({exc.name} is missing); "
              "install qvr with the `lsp` extra", file=sys.stderr)
        return 2
    return serve(args)

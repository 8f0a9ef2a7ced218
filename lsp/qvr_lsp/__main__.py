"""`qvr-lsp` / `qvr lsp` / `python -m qvr_lsp`: run the language server.

Speaks LSP over stdio by default; `--tcp [--host H] [--port P]` serves one TCP client
(for debugging with an editor attached to a running server).  Over stdio, `initialize` is
answered while pygls is still loading (`quickstart`); pygls is imported only in `serve`.
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stdio", action="store_true", help="speak LSP over stdin/stdout (the default)")
    p.add_argument("--tcp", action="store_true", help="serve over TCP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="TCP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")


def serve(args) -> int:
    if not args.tcp:
        from qvr_lsp import quickstart

        if quickstart.enabled():
            return quickstart.serve_stdio()
    from qvr_lsp.server import build_server

    server = build_server()
    if args.tcp:
        server.start_tcp(args.host, args.port)
    else:
        server.start_io()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="qvr-lsp", description="The QVR language server")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return serve(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

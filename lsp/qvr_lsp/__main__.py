"""`qvr-lsp` / `qvr lsp` / `python -m qvr_lsp`: run the language server.

Speaks LSP over stdio by default; `--tcp [--host H] [--port P]` serves one TCP client
(for debugging with an editor attached to a running server).  pygls is imported only in
`serve`.  An unexpected exception outside the handlers (which answer their own errors, see
`handlers.guarded`) is an internal error: `qvr.internal_error` saves its
traceback and prints one line (exit status 3).
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
    except Exception as exc:  # a bug: one message, the traceback saved to a file
        from qvr.internal_error import report
        return report(exc, args, argv=["lsp", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

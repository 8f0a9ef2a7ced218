"""qvr-lsp: the QVR language server (pygls 2), an adapter from `qvr.ide` to LSP.

Layout: `server.py` builds the server and registers features, `handlers.py` holds one thin
handler per LSP method, `convert.py` every position, URI and protocol-record conversion,
`__main__.py` the command line (`qvr-lsp`, `qvr lsp`); the start is pygls's own.  This
package never imports torch, the runtime or the dashboard.
"""
__version__ = "0.1.0"

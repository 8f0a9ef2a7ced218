"""The QVR language server: a pygls 2 `LanguageServer` holding one `qvr.analysis.Document`
per open file, plus a lazily built index of the workspace's `.qvr` files.

`build_server()` creates the server and registers every feature of `handlers.py` with its
options, so pygls derives the capabilities it announces at `initialize` from what is
registered.  The protocol subclass only chooses the position encoding (UTF-16 unless the
client offers UTF-8) before pygls builds its workspace.  Errors inside handlers are
reported through `window/logMessage` only (no pop-ups); see `handlers.guarded`.

This module never imports torch, the runtime or the dashboard.
"""
from __future__ import annotations

import copy
import os
from typing import Optional

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from qvr_lsp import __version__, convert

SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".hypothesis", ".pytest_cache"}
MAX_INDEXED_FILES = 2000


class QvrProtocol(LanguageServerProtocol):
    @lsp_method(T.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: T.DidChangeTextDocumentParams):
        """An open document's text lives in its `qvr.analysis.Document`, so pygls's own copy
        is not updated on change: pygls re-splits the whole text on every change (a few
        milliseconds on 5,000 lines), splits lines at form feeds and other characters that
        are not LSP line ends, and rewrites the change's positions in place.  pygls's copy
        is kept only for documents the server has no Document for."""
        if params.text_document.uri not in self._server.documents:
            pristine = copy.deepcopy(params)
            for change in params.content_changes:
                self.workspace.update_text_document(params.text_document, change)
            params = pristine
        if (handler := self.fm.features.get(T.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(T.INITIALIZE)
    def lsp_initialize(self, params: T.InitializeParams):
        caps = params.capabilities
        offered = caps.general.position_encodings if caps.general is not None else None
        chosen = convert.choose_encoding(offered)
        if offered:  # pygls takes the first offered encoding it supports: put ours first
            caps.general.position_encodings = [chosen] + [e for e in offered if e != chosen]
        return (yield from super().lsp_initialize(params))


class QvrLanguageServer(LanguageServer):
    def __init__(self, faults: Optional[set] = None):
        super().__init__("qvr-lsp", __version__, protocol_cls=QvrProtocol,
                         text_document_sync_kind=T.TextDocumentSyncKind.Incremental)
        self.documents: dict = {}  # uri -> qvr.analysis.Document
        self.index: dict = {}  # path -> (mtime, Document) for workspace files not open
        self._cache = None
        # methods that raise on purpose (fault-isolation tests): QVR_LSP_FAULTS=hover,completion
        self.faults = set(faults or ())

    @property
    def cache(self):
        if self._cache is None:
            from qvr.sema.module import CheckCache
            self._cache = CheckCache()
        return self._cache

    @property
    def codec(self):
        return convert.codec(self.workspace.position_encoding or convert.UTF16)

    def report_server_error(self, error: Exception, source) -> None:
        """pygls's default shows a pop-up for failed notifications; handlers already log."""
        return

    def log(self, message: str, kind: T.MessageType = T.MessageType.Log) -> None:
        try:
            self.window_log_message(T.LogMessageParams(type=kind, message=message))
        except Exception:  # pragma: no cover - never let logging kill a handler
            pass

    # ---------------------------------------------------------------- documents
    def open(self, uri: str, text: str):
        from qvr.analysis import Document
        doc = Document(text, convert.to_path(uri) or uri, cache=self.cache)
        self.documents[uri] = doc
        return doc

    def rebuild(self, uri: str):
        """Create a document from pygls's copy of the text (only for a document the server
        has no Document for: pygls's copy of an open one is not kept up to date)."""
        text = self.workspace.get_text_document(uri).source
        return self.open(uri, text)

    def document(self, uri: str):
        doc = self.documents.get(uri)
        if doc is None:
            td = self.workspace.get_text_document(uri)
            doc = self.open(uri, td.source)
        return doc

    def workspace_documents(self):
        """(uri, Document) for every open document and every `.qvr` file of the workspace."""
        from qvr.analysis import Document
        seen = set()
        for uri, doc in list(self.documents.items()):
            seen.add(convert.to_path(uri) or uri)
            yield uri, doc
        roots = []
        try:
            ws = self.workspace
            roots = [convert.to_path(f.uri) for f in ws.folders.values()] or [ws.root_path]
        except Exception:
            roots = []
        count = 0
        for root in filter(None, roots):
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
                for fn in filenames:
                    if not fn.endswith(".qvr"):
                        continue
                    path = os.path.join(dirpath, fn)
                    if path in seen:
                        continue
                    seen.add(path)
                    count += 1
                    if count > MAX_INDEXED_FILES:
                        return
                    try:
                        mtime = os.stat(path).st_mtime
                        hit = self.index.get(path)
                        if hit is None or hit[0] != mtime:
                            hit = (mtime, Document(_read_exact(path), path, cache=self.cache))
                            self.index[path] = hit
                    except (OSError, UnicodeDecodeError):
                        continue
                    yield convert.to_uri(path), hit[1]


def _read_exact(path) -> str:
    """A workspace file's text with its line ends as they are (as `qvr check` reads it
    and as an editor would send it: a lone `\r` is not turned into `\n`)."""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def build_server(faults: Optional[set] = None) -> QvrLanguageServer:
    from qvr_lsp import handlers

    if faults is None:
        env = os.environ.get("QVR_LSP_FAULTS", "")
        faults = {f.strip() for f in env.split(",") if f.strip()}
    server = QvrLanguageServer(faults)
    handlers.register(server)
    return server

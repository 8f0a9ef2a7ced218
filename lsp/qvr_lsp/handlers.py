"""LSP method handlers: thin adapters of the shape `from_lsp -> qvr.ide call -> to_lsp`.

Every handler is wrapped by `guarded`, which isolates faults per request: an internal
error is logged with its traceback through `window/logMessage` and answered with a
JSON-RPC error response.  When the incremental analysis fails while applying a change, the
document is rebuilt from its own text with the change applied (`convert.apply_changes`);
when didOpen fails, from the text it carried.  Either way the document stays usable and
diagnostics keep flowing.  User errors in the QVR text
are never exceptions (they are diagnostics).
Diagnostics are published right after every open and change: the incremental analysis
re-checks a one-character edit of a 5,000-line file in a few milliseconds.
"""
from __future__ import annotations

import functools
import traceback

from lsprotocol import types as T
from pygls.exceptions import JsonRpcException, JsonRpcInternalError

from qvr.text import Span
from qvr_lsp import convert as C


APPLY_FAULT = "qvr/applyChanges"  # fault-injection name for the incremental apply of didChange


class RequestFailed(JsonRpcException):
    """LSP `RequestFailed` (-32803): a valid request that cannot be honoured (e.g. rename)."""

    CODE = -32803


def guarded(method: str, notification: bool = False, recover: bool = False):
    """Per-handler fault isolation (see the module docstring); `recover` rebuilds the
    notification's document after a failure."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(ls, params):
            try:
                if ls.faults and _faulty(ls, method, params):
                    raise RuntimeError(f"injected fault in {method}")
                return fn(ls, params)
            except RequestFailed:
                raise
            except Exception as exc:
                ls.log(f"qvr-lsp: internal error in {method}: {exc!r}\n{traceback.format_exc()}",
                       T.MessageType.Error)
                if notification:
                    td = getattr(params, "text_document", None)
                    if recover and getattr(td, "uri", None) is not None:
                        _recover(ls, td)
                    return None
                raise JsonRpcInternalError(message=f"qvr-lsp: internal error in {method}: {exc}")
        return wrapper
    return deco


def _faulty(ls, method: str, params) -> bool:
    """Fault injection for tests: `QVR_LSP_FAULTS` lists methods (`textDocument/hover`), or
    `method@text` to fail only for documents whose URI contains `text`."""
    if method in ls.faults:
        return True
    uri = getattr(getattr(params, "text_document", None), "uri", "") or ""
    return any(f.startswith(method + "@") and f[len(method) + 1:] in uri for f in ls.faults)


def _recover(ls, td) -> None:
    """After a failed didOpen/didChange handler: make sure a document exists (from the text
    didOpen carried, else whatever text is known) and publish its diagnostics."""
    uri = td.uri
    try:
        if getattr(td, "text", None) is not None:
            ls.open(uri, td.text)
        elif uri not in ls.documents:
            ls.rebuild(uri)
        publish(ls, uri, getattr(td, "version", None))
    except Exception as exc:  # pragma: no cover - the text itself is unavailable
        ls.log(f"qvr-lsp: could not recover {uri}: {exc!r}", T.MessageType.Error)


# ---------------------------------------------------------------- lifecycle

def _warm_up() -> None:
    """Import the front end and build the parser while the client is still between
    `initialized` and its first `didOpen` (the protocol thread is idle then)."""
    import importlib
    try:
        for module in ("qvr.ide.completion", "qvr.ide.hover", "qvr.ide.semantic_tokens"):
            importlib.import_module(module)
        from qvr.analysis import Document
        Document("object A : FinSet 2\n").diagnostics()
    except Exception:  # pragma: no cover - the real request will report it
        pass


def initialized(ls, params: T.InitializedParams):
    import threading
    threading.Thread(target=_warm_up, name="qvr-warm-up", daemon=True).start()


# ---------------------------------------------------------------- documents and diagnostics

def publish(ls, uri: str, version=None) -> None:
    doc = ls.documents[uri]
    diags = C.to_lsp_diagnostics(doc, doc.diagnostics(), uri, ls.codec)
    ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=version))


@guarded(T.TEXT_DOCUMENT_DID_OPEN, notification=True, recover=True)
def did_open(ls, params: T.DidOpenTextDocumentParams):
    td = params.text_document
    ls.open(td.uri, td.text)
    publish(ls, td.uri, td.version)


@guarded(T.TEXT_DOCUMENT_DID_CHANGE, notification=True, recover=True)
def did_change(ls, params: T.DidChangeTextDocumentParams):
    uri = params.text_document.uri
    doc = ls.documents.get(uri)
    if doc is None:
        ls.rebuild(uri)
    else:
        pc = ls.codec
        before = doc.text
        try:
            if APPLY_FAULT in ls.faults:
                raise RuntimeError(f"injected fault in {APPLY_FAULT}")
            for change in params.content_changes:  # each change applies to the result of the previous
                doc.apply_edits([C.from_lsp_change(doc, change, pc)])
        except Exception as exc:  # the analysis failed: start afresh from the text itself
            ls.log(f"qvr-lsp: internal error applying a change to {uri}: {exc!r}\n{traceback.format_exc()}",
                   T.MessageType.Error)
            ls.open(uri, C.apply_changes(before, params.content_changes, pc))
    publish(ls, uri, params.text_document.version)


@guarded(T.TEXT_DOCUMENT_DID_CLOSE, notification=True)
def did_close(ls, params: T.DidCloseTextDocumentParams):
    uri = params.text_document.uri
    ls.documents.pop(uri, None)
    ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def _markdown(ls, feature: str) -> bool:
    """Whether the client renders Markdown for `feature` (hover, completion, signature)."""
    try:
        td = ls.client_capabilities.text_document
        if feature == "hover":
            formats = td.hover.content_format
        elif feature == "completion":
            formats = td.completion.completion_item.documentation_format
        else:
            formats = td.signature_help.signature_information.documentation_format
    except AttributeError:
        return False
    return formats is not None and T.MarkupKind.Markdown in formats


def _at(ls, params):
    uri = params.text_document.uri
    doc = ls.document(uri)
    return uri, doc, C.from_lsp_position(doc, params.position, ls.codec)


# ---------------------------------------------------------------- navigation

@guarded(T.TEXT_DOCUMENT_HOVER)
def hover(ls, params: T.HoverParams):
    from qvr.ide.hover import hover as ide_hover
    uri, doc, off = _at(ls, params)
    h = ide_hover(doc, off)
    return C.to_lsp_hover(doc, h, ls.codec, _markdown(ls, "hover")) if h else None


@guarded(T.TEXT_DOCUMENT_DEFINITION)
def definition(ls, params: T.DefinitionParams):
    from qvr.ide.goto import definition as ide_definition
    uri, doc, off = _at(ls, params)
    return C.to_lsp_locations(doc, uri, ide_definition(doc, off), ls.codec) or None


@guarded(T.TEXT_DOCUMENT_REFERENCES)
def references(ls, params: T.ReferenceParams):
    from qvr.ide.goto import references as ide_references
    uri, doc, off = _at(ls, params)
    spans = ide_references(doc, off, params.context.include_declaration)
    return C.to_lsp_locations(doc, uri, spans, ls.codec) or None


@guarded(T.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
def document_highlight(ls, params: T.DocumentHighlightParams):
    from qvr.ide.goto import highlights
    uri, doc, off = _at(ls, params)
    return C.to_lsp_highlights(doc, highlights(doc, off), ls.codec) or None


@guarded(T.TEXT_DOCUMENT_PREPARE_RENAME)
def prepare_rename(ls, params: T.PrepareRenameParams):
    from qvr.ide.rename import RenameError, prepare_rename as ide_prepare
    uri, doc, off = _at(ls, params)
    res = ide_prepare(doc, off)
    if isinstance(res, RenameError):
        raise RequestFailed(res.message)
    return T.PrepareRenamePlaceholder(range=C.to_lsp_range(doc, res.span, ls.codec), placeholder=res.placeholder)


@guarded(T.TEXT_DOCUMENT_RENAME)
def rename(ls, params: T.RenameParams):
    from qvr.ide.rename import RenameError, rename as ide_rename
    uri, doc, off = _at(ls, params)
    res = ide_rename(doc, off, params.new_name)
    if isinstance(res, RenameError):
        raise RequestFailed(res.message)
    return C.to_lsp_workspace_edit(doc, uri, res, ls.codec)


# ---------------------------------------------------------------- symbols

@guarded(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
def document_symbol(ls, params: T.DocumentSymbolParams):
    from qvr.ide.symbols import document_symbols
    doc = ls.document(params.text_document.uri)
    return [C.to_lsp_document_symbol(doc, s, ls.codec) for s in document_symbols(doc)]


@guarded(T.WORKSPACE_SYMBOL)
def workspace_symbol(ls, params: T.WorkspaceSymbolParams):
    from qvr.ide.symbols import workspace_symbols
    docs = dict(ls.workspace_documents())
    found = workspace_symbols(docs.items(), params.query)
    return [C.to_lsp_workspace_symbol(docs[s.key], s.key, s, ls.codec) for s in found]


# ---------------------------------------------------------------- editing help

def _snippets(ls) -> bool:
    try:
        c = ls.client_capabilities.text_document.completion.completion_item
        return bool(c and c.snippet_support)
    except AttributeError:
        return False


@guarded(T.TEXT_DOCUMENT_COMPLETION)
def completion(ls, params: T.CompletionParams):
    from qvr.ide.completion import complete
    uri, doc, off = _at(ls, params)
    return C.to_lsp_completions(doc, complete(doc, off), ls.codec, snippets=_snippets(ls),
                                markdown=_markdown(ls, "completion"))


@guarded(T.TEXT_DOCUMENT_SIGNATURE_HELP)
def signature_help(ls, params: T.SignatureHelpParams):
    from qvr.ide.signature import signature_help as ide_signature
    uri, doc, off = _at(ls, params)
    sig = ide_signature(doc, off)
    return C.to_lsp_signature_help(sig, _markdown(ls, "signature")) if sig else None


@guarded(T.TEXT_DOCUMENT_INLAY_HINT)
def inlay_hint(ls, params: T.InlayHintParams):
    from qvr.ide.inlay import inlay_hints
    doc = ls.document(params.text_document.uri)
    return C.to_lsp_inlay_hints(doc, inlay_hints(doc, C.from_lsp_range(doc, params.range, ls.codec)), ls.codec)


@guarded(T.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL)
def semantic_tokens_full(ls, params: T.SemanticTokensParams):
    from qvr.ide.semantic_tokens import TOKEN_MODIFIERS, TOKEN_TYPES, semantic_tokens
    doc = ls.document(params.text_document.uri)
    data = C.encode_semantic_tokens(doc, semantic_tokens(doc), TOKEN_TYPES, TOKEN_MODIFIERS, ls.codec)
    return T.SemanticTokens(data=data)


@guarded(T.TEXT_DOCUMENT_SEMANTIC_TOKENS_RANGE)
def semantic_tokens_range(ls, params: T.SemanticTokensRangeParams):
    from qvr.ide.semantic_tokens import TOKEN_MODIFIERS, TOKEN_TYPES, semantic_tokens
    doc = ls.document(params.text_document.uri)
    span = C.from_lsp_range(doc, params.range, ls.codec)
    data = C.encode_semantic_tokens(doc, semantic_tokens(doc, span), TOKEN_TYPES, TOKEN_MODIFIERS, ls.codec)
    return T.SemanticTokens(data=data)


@guarded(T.TEXT_DOCUMENT_FOLDING_RANGE)
def folding_range(ls, params: T.FoldingRangeParams):
    from qvr.ide.folding import folding_ranges
    doc = ls.document(params.text_document.uri)
    return C.to_lsp_folding_ranges(doc, folding_ranges(doc))


@guarded(T.TEXT_DOCUMENT_SELECTION_RANGE)
def selection_range(ls, params: T.SelectionRangeParams):
    from qvr.ide.selection import selection_ranges
    doc = ls.document(params.text_document.uri)
    out = []
    for pos in params.positions:
        off = C.from_lsp_position(doc, pos, ls.codec)
        out.append(C.to_lsp_selection_range(doc, selection_ranges(doc, off), ls.codec))
    return out


@guarded(T.TEXT_DOCUMENT_CODE_ACTION)
def code_action(ls, params: T.CodeActionParams):
    from qvr.ide.code_actions import code_actions
    only = params.context.only if params.context is not None else None
    if only and not any(str(k).startswith("quickfix") or k == T.CodeActionKind.QuickFix for k in only):
        return None  # the client asked for other kinds (e.g. source actions) only
    uri = params.text_document.uri
    doc = ls.document(uri)
    span = C.from_lsp_range(doc, params.range, ls.codec)
    return [C.to_lsp_code_action(doc, uri, a, ls.codec) for a in code_actions(doc, span)] or None


# ---------------------------------------------------------------- formatting

def _formatter():
    try:
        from qvr.syntax import format as fmt
    except ImportError as exc:
        raise RequestFailed(f"the formatter is not available in this build ({exc})")
    return fmt


@guarded(T.TEXT_DOCUMENT_FORMATTING)
def formatting(ls, params: T.DocumentFormattingParams):
    fmt = _formatter()
    doc = ls.document(params.text_document.uri)
    res = fmt.format_text(doc.text)
    if not res.changed:
        return []
    return [C.to_lsp_text_edit(doc, _whole(doc, res.text), ls.codec)]


def _whole(doc, text: str):
    from qvr.diagnostics import TextEdit
    return TextEdit(Span(0, len(doc.text)), text)


@guarded(T.TEXT_DOCUMENT_RANGE_FORMATTING)
def range_formatting(ls, params: T.DocumentRangeFormattingParams):
    fmt = _formatter()
    doc = ls.document(params.text_document.uri)
    span = C.from_lsp_range(doc, params.range, ls.codec)
    return [C.to_lsp_text_edit(doc, e, ls.codec) for e in fmt.format_range(doc.text, span.start, span.end)]


# ---------------------------------------------------------------- registration

def register(ls) -> None:
    from qvr.ide.token_legend import TOKEN_MODIFIERS, TOKEN_TYPES

    legend = T.SemanticTokensLegend(token_types=list(TOKEN_TYPES), token_modifiers=list(TOKEN_MODIFIERS))
    table = [
        (T.INITIALIZED, initialized, None),
        (T.TEXT_DOCUMENT_DID_OPEN, did_open, None),
        (T.TEXT_DOCUMENT_DID_CHANGE, did_change, None),
        (T.TEXT_DOCUMENT_DID_CLOSE, did_close, None),
        (T.TEXT_DOCUMENT_HOVER, hover, None),
        (T.TEXT_DOCUMENT_DEFINITION, definition, None),
        (T.TEXT_DOCUMENT_REFERENCES, references, None),
        (T.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT, document_highlight, None),
        (T.TEXT_DOCUMENT_PREPARE_RENAME, prepare_rename, None),
        (T.TEXT_DOCUMENT_RENAME, rename, None),
        (T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, document_symbol, None),
        (T.WORKSPACE_SYMBOL, workspace_symbol, None),
        (T.TEXT_DOCUMENT_COMPLETION, completion,
         T.CompletionOptions(trigger_characters=["=", "~", "[", "(", ",", ">", "-", "@"])),
        (T.TEXT_DOCUMENT_SIGNATURE_HELP, signature_help, T.SignatureHelpOptions(trigger_characters=["(", ","])),
        (T.TEXT_DOCUMENT_INLAY_HINT, inlay_hint, None),
        (T.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, semantic_tokens_full, legend),
        (T.TEXT_DOCUMENT_SEMANTIC_TOKENS_RANGE, semantic_tokens_range, legend),
        (T.TEXT_DOCUMENT_FOLDING_RANGE, folding_range, None),
        (T.TEXT_DOCUMENT_SELECTION_RANGE, selection_range, None),
        (T.TEXT_DOCUMENT_CODE_ACTION, code_action,
         T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix])),
        (T.TEXT_DOCUMENT_FORMATTING, formatting, None),
        (T.TEXT_DOCUMENT_RANGE_FORMATTING, range_formatting, None),
    ]
    for method, fn, options in table:
        ls.feature(method, options)(fn)

"""The server never dies on input: a failing handler is logged and answered with an error,
a failing notification rebuilds the document, and everything else keeps working.  Faults
are injected with `QVR_LSP_FAULTS` (a comma-separated list of LSP methods that raise)."""
import pytest
import pytest_lsp
from lsp_support import SERVER, change_doc, find, open_doc, server_env, span_text
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT = "object K : FinSet 3\nprogram p : K -> K\n    sample mu <- Normal(0.0, 1.0)\n    return mu\n"
URI = "file:///tmp/qvr_faults.qvr"
FAULTS = "textDocument/hover,qvr/applyChanges,textDocument/didClose,textDocument/didOpen@faulty_open"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(
    server_command=SERVER, server_env=server_env(QVR_LSP_FAULTS=FAULTS)))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(capabilities=pytest_lsp.client_capabilities("neovim@0.7.0")))
    assert await open_doc(lsp_client, URI, TEXT) == []
    yield
    await lsp_client.shutdown_session()


async def test_a_failing_request_is_logged_and_answered_with_an_error(client: LanguageClient):
    n = len(client.log_messages)
    with pytest.raises(JsonRpcException) as err:
        await client.text_document_hover_async(T.HoverParams(
            text_document=T.TextDocumentIdentifier(uri=URI), position=find(TEXT, "sample $0mu")))
    assert err.value.code == -32603
    assert "internal error in textDocument/hover: injected fault" in err.value.message
    logged = [m for m in client.log_messages[n:] if m.type == T.MessageType.Error]
    assert logged and "injected fault in textDocument/hover" in logged[0].message
    assert "Traceback" in logged[0].message
    assert client.messages == []  # no pop-ups
    # other requests on the same document still work
    res = await client.text_document_definition_async(T.DefinitionParams(
        text_document=T.TextDocumentIdentifier(uri=URI), position=find(TEXT, "return $0mu")))
    assert [r.range.start for r in res] == [find(TEXT, "sample $0mu")]


async def test_a_failing_change_keeps_the_document_usable(client: LanguageClient):
    n = len(client.log_messages)
    # applying the change to the incremental analysis fails; the server starts afresh from the text
    diags = await change_doc(client, URI, 2, [T.TextDocumentContentChangePartial(
        range=T.Range(start=find(TEXT, "return $0mu"), end=find(TEXT, "return mu$0")), text="mo")])
    new = TEXT.replace("return mu", "return mo")
    assert [(d.code, span_text(new, d.range)) for d in diags] == [("QVR106", "mo")]
    assert any("injected fault in qvr/applyChanges" in m.message for m in client.log_messages[n:])
    res = await client.text_document_references_async(T.ReferenceParams(
        text_document=T.TextDocumentIdentifier(uri=URI), position=find(new, "sample $0mu"),
        context=T.ReferenceContext(include_declaration=True)))
    assert [span_text(new, r.range) for r in res] == ["mu"]
    comp = await client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=URI), position=find(new, "return mo$0")))
    assert comp is not None


async def test_requests_for_unknown_documents_and_odd_positions_do_not_kill_the_server(client: LanguageClient):
    with pytest.raises(JsonRpcException):
        await client.text_document_document_symbol_async(T.DocumentSymbolParams(
            text_document=T.TextDocumentIdentifier(uri="file:///tmp/never_opened_qvr.qvr")))
    res = await client.text_document_definition_async(T.DefinitionParams(
        text_document=T.TextDocumentIdentifier(uri=URI), position=T.Position(line=999, character=999)))
    assert res is None
    syms = await client.text_document_document_symbol_async(T.DocumentSymbolParams(
        text_document=T.TextDocumentIdentifier(uri=URI)))
    assert [s.name for s in syms] == ["K", "p"]


async def test_a_failing_notification_handler_is_logged_and_the_server_goes_on(client: LanguageClient):
    n = len(client.log_messages)
    uri = "file:///tmp/qvr_faults_close.qvr"
    await open_doc(client, uri, "object A : FinSet 2\n")
    client.text_document_did_close(T.DidCloseTextDocumentParams(text_document=T.TextDocumentIdentifier(uri=uri)))
    syms = await client.text_document_document_symbol_async(T.DocumentSymbolParams(
        text_document=T.TextDocumentIdentifier(uri=URI)))
    assert [s.name for s in syms] == ["K", "p"]
    assert any("injected fault in textDocument/didClose" in m.message for m in client.log_messages[n:])


async def test_form_feeds_and_other_python_line_breaks_do_not_desync_the_document(client: LanguageClient):
    # str.splitlines (used by pygls for its own copy) breaks at \f, \x1c and \u2028; LSP does not
    uri = "file:///tmp/qvr_formfeed.qvr"
    text = "object A :\fFinSet 2  # \x1c \u2028 odd\nobject B : FinSet 3\nobject C : Siez\n"
    diags = await open_doc(client, uri, text)
    assert [(d.code, span_text(text, d.range)) for d in diags] == [("QVR101", "Siez")]
    start, end = find(text, "object C : $0Siez"), find(text, "object C : Siez$0")
    diags = await change_doc(client, uri, 2, [T.TextDocumentContentChangePartial(
        range=T.Range(start=start, end=end), text="B")])
    assert diags == []
    diags = await change_doc(client, uri, 3, [T.TextDocumentContentChangePartial(
        range=T.Range(start=find(text, "object $0B"), end=find(text, "object B$0")), text="D")])
    new = text.replace("object B", "object D").replace("Siez", "B")
    assert [(d.code, span_text(new, d.range)) for d in diags] == [("QVR101", "B")]


async def test_a_failing_open_still_gives_a_usable_document(client: LanguageClient):
    n = len(client.log_messages)
    uri = "file:///tmp/qvr_faulty_open.qvr"
    text = "object A : FinSet 2\nobject B : Siez\n"
    diags = await open_doc(client, uri, text)
    assert [(d.code, span_text(text, d.range)) for d in diags] == [("QVR101", "Siez")]
    assert any("injected fault in textDocument/didOpen" in m.message for m in client.log_messages[n:])
    res = await client.text_document_definition_async(T.DefinitionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=find(text, "object $0A")))
    assert [r.range.start for r in res] == [find(text, "object $0A")]

"""Formatting end to end: `textDocument/formatting` and `rangeFormatting` return exactly the
edits of `qvr.syntax.format` (the formatter `qvr fmt` uses)."""
import pytest
import pytest_lsp
from lsp_support import SERVER, find, open_doc, server_env
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

fmt = pytest.importorskip("qvr.syntax.format", reason="the formatter (qvr/syntax/format.py) is not in this tree")

pytestmark = pytest.mark.asyncio(loop_scope="module")

MESSY = ("object   K :FinSet 3\n"
         "morphism f : K->K [ role = latent ]\n"
         "program p:K -> K\n"
         "  sample mu<-Normal( 0.0,1.0 )   # a comment 😋\n"
         "  return mu\n")
URI = "file:///tmp/qvr_fmt.qvr"
OPTIONS = T.FormattingOptions(tab_size=4, insert_spaces=True)


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, server_env=server_env()))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(capabilities=pytest_lsp.client_capabilities("visual-studio-code")))
    await open_doc(lsp_client, URI, MESSY)
    yield
    await lsp_client.shutdown_session()


def apply(text, edits):
    out = text
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        lines = out.split("\n")
        def off(p):  # ASCII lines only before the emoji, so code units are characters here
            return sum(len(l) + 1 for l in lines[:p.line]) + p.character
        out = out[:off(e.range.start)] + e.new_text + out[off(e.range.end):]
    return out


async def test_document_formatting(client: LanguageClient):
    edits = await client.text_document_formatting_async(T.DocumentFormattingParams(
        text_document=T.TextDocumentIdentifier(uri=URI), options=OPTIONS))
    expected = fmt.format_text(MESSY).text
    assert expected != MESSY
    assert apply(MESSY, edits) == expected
    assert "    sample mu <- Normal(0.0, 1.0)  # a comment 😋\n" in expected


async def test_range_formatting_touches_only_the_selected_statement(client: LanguageClient):
    rng = T.Range(start=find(MESSY, "morphism $0f"), end=find(MESSY, "morphism f$0"))
    edits = await client.text_document_range_formatting_async(T.DocumentRangeFormattingParams(
        text_document=T.TextDocumentIdentifier(uri=URI), range=rng, options=OPTIONS))
    out = apply(MESSY, edits)
    assert out.splitlines()[1] == "morphism f : K -> K [role=latent]"
    assert out.splitlines()[0] == "object   K :FinSet 3" and out.splitlines()[2] == "program p:K -> K"


async def test_formatting_an_already_formatted_document_returns_no_edits(client: LanguageClient):
    uri = "file:///tmp/qvr_fmt_clean.qvr"
    await open_doc(client, uri, fmt.format_text(MESSY).text)
    edits = await client.text_document_formatting_async(T.DocumentFormattingParams(
        text_document=T.TextDocumentIdentifier(uri=uri), options=OPTIONS))
    assert list(edits or []) == []

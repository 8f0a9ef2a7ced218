"""The statistics extension (docs/extensions.md E9) end to end over stdio with pytest-lsp:
a document using `data` and `record` steps, `@`, the new builtins, a lambda, `Flat`/
`HalfFlat`, truncation and a constrained space gets no diagnostics; hover on a `data` and a
`record` name, completion of a builtin, signature help on `sum(`, semantic tokens, the
outline, inlay hints and formatting."""
import pytest
import pytest_lsp
from lsp_support import SERVER, find, open_doc, server_env, span_text
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

from qvr.ide.token_legend import TOKEN_MODIFIERS, TOKEN_TYPES
from qvr.sema.families import BUILTINS
from qvr.syntax.format import format_text

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT = """\
## The households.
object Household : FinSet 20
object Coef : FinSet 3
object Means : PositiveOrdered 2

## A regression with a design matrix.
program regression : Household -> Household
    data X : Household * Coef
    sample beta : Coef <- Flat
    sample means <- HalfFlat [over=Means]
    sample sigma <- StudentT(3.0, 0.0, 1.0) [lower=0.0]
    record mu = X @ beta
    score prior = sum(beta, Coef) + log_density(Normal(0.0, 1.0), means[0])
    let path = scan(Household, 0.0, (s, t) -> s + mu[t])
    let eta = mu + path
    observe y : Household <- Normal(eta, sigma)
    return y

export regression
"""
URI = "file:///tmp/qvr_e9_lsp.qvr"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, server_env=server_env()))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(T.InitializeParams(
        capabilities=pytest_lsp.client_capabilities("visual-studio-code")))
    lsp_client.opened = await open_doc(lsp_client, URI, TEXT)
    yield
    await lsp_client.shutdown_session()


def doc_id(uri=URI):
    return T.TextDocumentIdentifier(uri=uri)


async def test_no_diagnostics(client: LanguageClient):
    assert client.opened == []


async def hover(client, text, needle, uri=URI):
    res = await client.text_document_hover_async(T.HoverParams(text_document=doc_id(uri), position=find(text, needle)))
    assert res is not None and res.contents.kind == T.MarkupKind.Markdown
    return res.contents.value


async def test_hover_on_a_data_name_and_a_record_name(client: LanguageClient):
    data = await hover(client, TEXT, "data $0X")
    assert data.startswith("```qvr\nX : Household * Coef\n```\n")
    assert "data" in data.split("```\n", 2)[-1]
    assert await hover(client, TEXT, "mu = $0X @") == data  # a use shows the same
    record = await hover(client, TEXT, "record m$0u")
    assert record.startswith("```qvr\nrecord mu : Household\n```\n")
    assert "recorded per draw" in record


async def test_hover_on_a_builtin_and_a_lambda_parameter(client: LanguageClient):
    assert (await hover(client, TEXT, "prior = su$0m(")).startswith(f"```qvr\n{BUILTINS['sum'].signature}\n```")
    lam = await hover(client, TEXT, "(s, $0t) ->")
    assert lam.startswith("```qvr\nt : ")


async def test_completion_of_a_builtin(client: LanguageClient):
    uri = "file:///tmp/qvr_e9_completion.qvr"
    text = TEXT.replace("    let eta = mu + path", "    let eta = mu + path + logsu")
    await open_doc(client, uri, text)
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=doc_id(uri), position=find(text, "path + logsu$0")))
    items = {i.label: i for i in res.items}
    item = items["logsumexp"]
    b = BUILTINS["logsumexp"]
    assert (item.kind, item.detail) == (T.CompletionItemKind.Function, f"{b.signature} · {b.kinds}")
    assert item.insert_text_format == T.InsertTextFormat.Snippet
    assert item.text_edit.new_text == "logsumexp(${1:x})"
    assert span_text(text, item.text_edit.range) == "logsu"
    assert item.documentation.value == b.doc
    # objects inside the object argument of a reduction
    text2 = TEXT.replace("sum(beta, Coef)", "sum(beta, )")
    await open_doc(client, uri + "2", text2)
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=doc_id(uri + "2"), position=find(text2, "sum(beta, $0)")))
    assert [(i.label, i.kind) for i in res.items] == [("Coef", T.CompletionItemKind.Class),
                                                      ("Household", T.CompletionItemKind.Class)]


async def test_completion_of_the_new_steps_and_families(client: LanguageClient):
    uri = "file:///tmp/qvr_e9_steps.qvr"
    text = TEXT.replace("    return y", "    \n    return y")
    await open_doc(client, uri, text)
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=doc_id(uri), position=find(text, "sigma)\n    $0\n")))
    snippets = {i.label: i.text_edit.new_text for i in res.items if i.kind == T.CompletionItemKind.Snippet}
    assert snippets["data"] == "data ${1:X} : ${2:Row}" and snippets["record"] == "record ${1:v} = ${0}"
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=doc_id(), position=find(TEXT, "sample beta : Coef <- $0Flat")))
    flat = {i.label: i for i in res.items}["Flat"]
    assert (flat.kind, flat.text_edit.new_text, flat.insert_text_format) == (
        T.CompletionItemKind.Struct, "Flat", T.InsertTextFormat.PlainText)


async def test_signature_help_on_sum(client: LanguageClient):
    uri = "file:///tmp/qvr_e9_sig.qvr"
    text = TEXT.replace("score prior = sum(beta, Coef)", "score prior = sum(beta, ")
    text = text[:text.index("sum(beta, ") + len("sum(beta, ")]
    await open_doc(client, uri, text)
    res = await client.text_document_signature_help_async(T.SignatureHelpParams(
        text_document=doc_id(uri), position=find(text, "sum(beta, $0")))
    sig = res.signatures[res.active_signature]
    assert sig.label == "sum(x, axis?)"
    assert res.active_parameter == 1 and [p.label for p in sig.parameters] == [(4, 5), (7, 12)]
    assert sig.documentation.value == f"builtin · {BUILTINS['sum'].kinds} — {BUILTINS['sum'].doc}"
    res = await client.text_document_signature_help_async(T.SignatureHelpParams(
        text_document=doc_id(), position=find(TEXT, "scan(Household, 0.0, (s, t) -> s + $0mu")))
    sig = res.signatures[res.active_signature]
    assert sig.label == "scan(O, init, (s, t) -> body)" and res.active_parameter == 2


async def test_semantic_tokens_of_data_and_record(client: LanguageClient):
    full = await client.text_document_semantic_tokens_full_async(T.SemanticTokensParams(text_document=doc_id()))
    data = list(full.data)
    line = col = 0
    found = {}
    for i in range(0, len(data), 5):
        dl, dc, length, typ, mods = data[i:i + 5]
        line, col = line + dl, (col + dc if dl == 0 else dc)
        word = TEXT.split("\n")[line][col:col + length]
        found.setdefault(word, set()).add(
            (TOKEN_TYPES[typ], tuple(m for j, m in enumerate(TOKEN_MODIFIERS) if mods >> j & 1)))
    assert ("keyword", ()) in found["data"] and ("keyword", ()) in found["record"]
    assert ("variable", ("declaration", "readonly")) in found["X"]
    assert ("operator", ()) in found["@"]
    assert ("function", ("defaultLibrary",)) in found["scan"]
    assert ("parameter", ("declaration",)) in found["s"]


async def test_outline_and_inlay_hints(client: LanguageClient):
    res = await client.text_document_document_symbol_async(T.DocumentSymbolParams(text_document=doc_id()))
    [program] = [s for s in res if s.name == "regression"]
    children = {c.name: c for c in program.children}
    assert list(children) == ["X", "beta", "means", "sigma", "mu", "prior", "path", "eta", "y"]
    assert children["X"].kind == T.SymbolKind.Variable and children["X"].detail == "Household * Coef"
    assert children["mu"].detail == "Household"
    hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        text_document=doc_id(), range=T.Range(start=T.Position(line=0, character=0),
                                              end=T.Position(line=20, character=0))))
    by_line = {h.position.line: h.label for h in hints}
    assert by_line[11] == ": Household" and (11, len("    record mu")) in {
        (h.position.line, h.position.character) for h in hints}
    assert 7 not in by_line  # the data step spells its type out


async def test_formatting(client: LanguageClient):
    uri = "file:///tmp/qvr_e9_fmt.qvr"
    messy = (TEXT.replace("    data X : Household * Coef", "    data X:Household*Coef   # design")
             .replace("X @ beta", "X@beta").replace("(s, t) -> s", "( s,t )->s")
             .replace("[lower=0.0]", "[ lower = 0.0 ]"))
    assert messy != TEXT
    await open_doc(client, uri, messy)
    edits = await client.text_document_formatting_async(T.DocumentFormattingParams(
        text_document=doc_id(uri), options=T.FormattingOptions(tab_size=4, insert_spaces=True)))
    out = messy
    lines_before = messy.split("\n")
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        def off(p):
            return sum(len(l) + 1 for l in lines_before[:p.line]) + p.character
        out = out[:off(e.range.start)] + e.new_text + out[off(e.range.end):]
    expected = TEXT.replace("    data X : Household * Coef", "    data X : Household * Coef  # design")
    assert out == expected == format_text(messy).text

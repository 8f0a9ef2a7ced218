"""Positions end to end, per client capability profile: the negotiated encoding (UTF-16 by
default, UTF-8 whenever offered, UTF-32 only if it is all the client offers) is honoured
for text with accents and emoji in comments and strings before the queried positions,
on the same line and on earlier lines."""
import pytest
import pytest_lsp
from lsp_support import CLIENT_PROFILES as PROFILES, SERVER, change_doc, find, open_doc, server_env, span_text
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXT = """\
## Café ☕ au lait, naïve 😋 doc comment
object Word : FinSet 5  # ünïcödé 🐕 trailing comment
object Vec : Real 3
morphism f : Vec -> Vec #{ 😋 é }# [role=kernel] ~ Normall
deduction D : Word -> Word
    atoms N, dog, cat
    lexicon
        "chien 🐕 é" : N = dog
        "😋😋" : Nuon = cat
"""
URI = "file:///tmp/qvr_positions_ü.qvr"


@pytest_lsp.fixture(scope="module", params=list(PROFILES),
                    config=ClientServerConfig(server_command=SERVER, server_env=server_env()))
async def client(lsp_client: LanguageClient, request):
    make, encoding = PROFILES[request.param]
    res = await lsp_client.initialize_session(T.InitializeParams(capabilities=make()))
    lsp_client.encoding = encoding
    lsp_client.negotiated = res.capabilities.position_encoding
    lsp_client.first_diagnostics = await open_doc(lsp_client, URI, TEXT)
    yield
    await lsp_client.shutdown_session()


def at(client, needle, nth=0):
    return find(TEXT, needle, nth, client.encoding)


async def test_negotiated_encoding(client: LanguageClient):
    assert client.negotiated == client.encoding


async def test_diagnostic_ranges_after_non_ascii_on_the_same_line(client: LanguageClient):
    got = [(d.code, d.range.start, span_text(TEXT, d.range, client.encoding)) for d in client.first_diagnostics]
    assert got == [("QVR108", at(client, "~ $0Normall"), "Normall"),
                   ("QVR502", at(client, '"😋😋" : $0Nuon'), "Nuon")]


async def test_hover_and_definition_after_an_emoji_string(client: LanguageClient):
    doc = T.TextDocumentIdentifier(uri=URI)
    h = await client.text_document_hover_async(T.HoverParams(text_document=doc, position=at(client, "= d$0og")))
    assert h.contents.value == "```qvr\natom dog\n```\ndeduction D"
    assert h.range.start == at(client, "= $0dog") and h.range.end == at(client, "= dog$0")
    d = await client.text_document_definition_async(T.DefinitionParams(text_document=doc,
                                                                       position=at(client, ": N$0 = dog")))
    assert [l.range.start for l in d] == [at(client, "atoms $0N")]


async def test_completion_range_and_rename_edits(client: LanguageClient):
    doc = T.TextDocumentIdentifier(uri=URI)
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=doc, position=at(client, "~ Norm$0all")))
    assert "Normal" in [i.label for i in res.items]
    assert res.items[0].text_edit.range == T.Range(start=at(client, "~ $0Normall"), end=at(client, "~ Normall$0"))
    edit = await client.text_document_rename_async(T.RenameParams(text_document=doc, position=at(client, "atoms N, d$0og"),
                                                                  new_name="hound"))
    assert sorted((e.range.start.line, e.range.start.character, e.range.end.character)
                  for e in edit.changes[URI]) == sorted(
        (p.line, p.character, p.character + 3) for p in (at(client, "atoms N, $0dog"), at(client, "= $0dog")))


async def test_semantic_tokens_count_code_units(client: LanguageClient):
    doc = T.TextDocumentIdentifier(uri=URI)
    line = 7
    res = await client.text_document_semantic_tokens_range_async(T.SemanticTokensRangeParams(
        text_document=doc, range=T.Range(start=T.Position(line=line, character=0),
                                         end=T.Position(line=line + 1, character=0))))
    data = list(res.data)
    string_len = find(TEXT, '"chien 🐕 é"$0', 0, client.encoding).character - find(
        TEXT, '$0"chien 🐕 é"', 0, client.encoding).character
    assert data[:5] == [line, 8, string_len, 13, 0]  # the string token, its length in code units
    assert data[5:8] == [0, string_len + 3, 1]  # `N`, after ` : `


async def test_incremental_change_after_an_emoji(client: LanguageClient):
    # fix `Normall` (after the block comment with an emoji) by deleting one `l`
    start = at(client, "~ Normal$0l")
    end = at(client, "~ Normall$0")
    diags = await change_doc(client, URI, 2, [T.TextDocumentContentChangePartial(
        range=T.Range(start=start, end=end), text="")])
    fixed = TEXT.replace("Normall", "Normal")
    assert [(d.code, span_text(fixed, d.range, client.encoding)) for d in diags] == [("QVR502", "Nuon")]
    # and put it back, as a replacement that spans the emoji string of another line
    diags = await change_doc(client, URI, 3, [T.TextDocumentContentChangePartial(
        range=T.Range(start=find(fixed, "~ Normal$0", 0, client.encoding), end=find(fixed, "~ Normal$0", 0, client.encoding)),
        text="l")])
    assert [d.code for d in diags] == ["QVR108", "QVR502"]

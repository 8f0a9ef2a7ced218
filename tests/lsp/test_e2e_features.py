"""End to end over stdio with pytest-lsp: every feature of the server, one shared server.

The client announces VS Code's capabilities (snippets, prepareRename, hierarchical
symbols) and the workspace root `examples/`.
"""
import pytest
import pytest_lsp
from lsp_support import EXAMPLES, SERVER, find, open_doc, change_doc, position, server_env, span_text
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

SEED = (EXAMPLES / "transformer_lm.qvr").read_text(encoding="utf-8")
SEED_URI = (EXAMPLES / "transformer_lm.qvr").as_uri()


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, server_env=server_env()))
async def client(lsp_client: LanguageClient):
    caps = pytest_lsp.client_capabilities("visual-studio-code")
    lsp_client.init_result = await lsp_client.initialize_session(T.InitializeParams(
        capabilities=caps, root_uri=EXAMPLES.as_uri(),
                                                           workspace_folders=[T.WorkspaceFolder(
                                                               uri=EXAMPLES.as_uri(), name="examples")]))
    assert await open_doc(lsp_client, SEED_URI, SEED) == []
    yield
    await lsp_client.shutdown_session()


def doc_id(uri=SEED_URI):
    return T.TextDocumentIdentifier(uri=uri)


async def test_capabilities_announce_every_feature(client: LanguageClient):
    caps = client.init_result.capabilities
    assert client.init_result.server_info.name == "qvr-lsp"
    assert caps.position_encoding == "utf-16"
    assert caps.text_document_sync.change == T.TextDocumentSyncKind.Incremental
    for name in ("hover_provider", "definition_provider", "references_provider", "document_highlight_provider",
                 "document_symbol_provider", "workspace_symbol_provider", "completion_provider",
                 "signature_help_provider", "inlay_hint_provider", "semantic_tokens_provider",
                 "folding_range_provider", "selection_range_provider", "code_action_provider",
                 "document_formatting_provider", "document_range_formatting_provider", "rename_provider"):
        assert getattr(caps, name), name
    assert caps.rename_provider.prepare_provider is True
    assert caps.semantic_tokens_provider.full and caps.semantic_tokens_provider.range


async def test_diagnostics_on_open_and_change_with_codes_ranges_and_related(client: LanguageClient):
    uri = "file:///tmp/qvr_e2e_dup.qvr"
    text = "object A : FinSet 2\nobject B : Siez\nobject A : FinSet 3\n"
    diags = await open_doc(client, uri, text)
    got = [(d.code, d.severity, d.source, span_text(text, d.range), d.message) for d in diags]
    assert got == [
        ("QVR101", T.DiagnosticSeverity.Error, "qvr", "Siez", "undefined object `Siez`"),
        ("QVR104", T.DiagnosticSeverity.Error, "qvr", "A", "`A` is already declared on line 1"),
    ]
    assert diags[1].range == T.Range(start=T.Position(line=2, character=7), end=T.Position(line=2, character=8))
    (rel,) = diags[1].related_information
    assert rel.location.uri == uri and rel.message == "`A` is first declared here"
    assert rel.location.range == T.Range(start=T.Position(line=0, character=7), end=T.Position(line=0, character=8))
    # an incremental change: `Siez` -> `A` fixes the first error, and a warning appears elsewhere
    diags = await change_doc(client, uri, 2, [T.TextDocumentContentChangePartial(
        range=T.Range(start=T.Position(line=1, character=11), end=T.Position(line=1, character=15)), text="A")])
    assert [(d.code, span_text("object A : FinSet 2\nobject B : A\nobject A : FinSet 3\n", d.range))
            for d in diags] == [("QVR104", "A")]
    diags = await change_doc(client, uri, 3, [T.TextDocumentContentChangeWholeDocument(text="object A : FinSet 0\n")])
    assert [(d.code, d.message, d.range.start.character, d.range.end.character) for d in diags] == [
        ("QVR205", "`FinSet` size must be at least 1, got 0", 18, 19)]


async def test_warning_severity(client: LanguageClient):
    uri = "file:///tmp/qvr_e2e_warn.qvr"
    diags = await open_doc(client, uri, "object K : FinSet 3\nprogram p : K -> K\n    sample a <- HalfNormal(-1.0)\n"
                                        "    return a\n")
    assert [(d.code, d.severity) for d in diags] == [("QVR706", T.DiagnosticSeverity.Warning)]


@pytest.mark.parametrize("needle,expected", [
    ("let back$0bone", "```qvr\nbackbone : Token -> Latent\n```\nlet"),
    ("let layer = f$0an(head)", "```qvr\nfan(head) : Latent -> HeadOut * HeadOut * HeadOut * HeadOut\n```\n"
                                "structure: Real 16 -> Real 16"),
    ("sample $0h", "```qvr\nh : Latent\n```\nsample step · line 25"),
    ("object Tok$0en", "```qvr\nToken : FinSet 32\n```\nobject\n\n"
                       "Transformer language model over a 32-symbol vocabulary (seed 000)."),
])
async def test_hover(client: LanguageClient, needle, expected):
    res = await client.text_document_hover_async(T.HoverParams(text_document=doc_id(), position=find(SEED, needle)))
    assert res.contents.kind == T.MarkupKind.Markdown
    assert res.contents.value == expected


async def test_hover_on_whitespace_is_null(client: LanguageClient):
    res = await client.text_document_hover_async(T.HoverParams(text_document=doc_id(),
                                                               position=T.Position(line=19, character=0)))
    assert res is None


async def test_definition_from_a_program_step(client: LanguageClient):
    res = await client.text_document_definition_async(T.DefinitionParams(
        text_document=doc_id(), position=find(SEED, "sample h <- back$0bone")))
    assert [(l.uri, l.range) for l in res] == [(SEED_URI, T.Range(start=find(SEED, "let $0backbone"),
                                                                  end=find(SEED, "let backbone$0")))]


async def test_definition_from_a_deduction_rule(client: LanguageClient):
    path = EXAMPLES / "pcfg_deduction.qvr"
    text = path.read_text(encoding="utf-8")
    await open_doc(client, path.as_uri(), text)
    res = await client.text_document_definition_async(T.DefinitionParams(
        text_document=doc_id(path.as_uri()), position=find(text, "rule plural : span(I, K, St$0em)")))
    assert [span_text(text, l.range) for l in res] == ["Stem"]
    assert res[0].range.start == find(text, "atoms N, $0Stem")


async def test_references_and_highlight(client: LanguageClient):
    res = await client.text_document_references_async(T.ReferenceParams(
        text_document=doc_id(), position=find(SEED, "let lay$0er"), context=T.ReferenceContext(include_declaration=True)))
    assert [(l.range.start.line, span_text(SEED, l.range)) for l in res] == [(20, "layer"), (21, "layer")]
    hl = await client.text_document_document_highlight_async(T.DocumentHighlightParams(
        text_document=doc_id(), position=find(SEED, "lm_head($0h)")))
    assert [(h.range.start.line, h.kind) for h in hl] == [(24, T.DocumentHighlightKind.Write),
                                                          (26, T.DocumentHighlightKind.Read)]


async def test_prepare_rename_and_rename(client: LanguageClient):
    res = await client.text_document_prepare_rename_async(T.PrepareRenameParams(
        text_document=doc_id(), position=find(SEED, "let back$0bone")))
    assert res.placeholder == "backbone" and span_text(SEED, res.range) == "backbone"
    edit = await client.text_document_rename_async(T.RenameParams(
        text_document=doc_id(), position=find(SEED, "let back$0bone"), new_name="trunk"))
    assert sorted((e.range.start.line, e.range.start.character) for e in edit.changes[SEED_URI]) == [(21, 4), (24, 16)]
    assert {e.new_text for e in edit.changes[SEED_URI]} == {"trunk"}


@pytest.mark.parametrize("needle,new,message", [
    ("$0sample h", None, "`sample` is a keyword and cannot be renamed"),
    ("~ Nor$0mal", None, "`Normal` is a distribution family and cannot be renamed"),
    ("let back$0bone", "tok_embed", "`tok_embed` is already declared as a value on line 12"),
])
async def test_rename_refusals_are_error_responses_with_a_clear_message(client: LanguageClient, needle, new, message):
    from pygls.exceptions import JsonRpcException
    with pytest.raises(JsonRpcException) as err:
        if new is None:
            await client.text_document_prepare_rename_async(T.PrepareRenameParams(
                text_document=doc_id(), position=find(SEED, needle)))
        else:
            await client.text_document_rename_async(T.RenameParams(
                text_document=doc_id(), position=find(SEED, needle), new_name=new))
    assert err.value.message == message
    assert err.value.code == -32803


async def test_document_symbols_are_hierarchical(client: LanguageClient):
    res = await client.text_document_document_symbol_async(T.DocumentSymbolParams(text_document=doc_id()))
    by_name = {s.name: s for s in res}
    assert by_name["Token"].kind == T.SymbolKind.Class and by_name["layer"].kind == T.SymbolKind.Function
    assert [c.name for c in by_name["head"].children] == ["head_0", "head_1", "head_2", "head_3"]
    prog = by_name["transformer_lm"]
    assert [(c.name, c.kind, c.detail) for c in prog.children] == [
        ("h", T.SymbolKind.Variable, "Latent"), ("next_token", T.SymbolKind.Variable, "[Token] Token")]
    assert prog.range.start.line == 23 and prog.range.end.line == 27


async def test_workspace_symbols_cover_unopened_files(client: LanguageClient):
    res = await client.workspace_symbol_async(T.WorkspaceSymbolParams(query="site_eff"))
    assert [(s.name, s.location.uri.rsplit("/", 1)[-1]) for s in res] == [("site_effects", "crop_yields.qvr")]
    res = await client.workspace_symbol_async(T.WorkspaceSymbolParams(query="Grammar"))
    assert [(s.name, s.kind) for s in res] == [("Grammar", T.SymbolKind.Module)]


async def test_completion_in_a_chain_ranks_matching_domains_first(client: LanguageClient):
    uri = "file:///tmp/qvr_e2e_completion.qvr"
    text = SEED.replace("let backbone = tok_embed >> stack(layer, 2)", "let backbone = tok_embed >> ")
    await open_doc(client, uri, text)
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=doc_id(uri), position=find(text, "let backbone = tok_embed >> $0")))
    labels = [(i.label, i.kind) for i in sorted(res.items, key=lambda i: i.sort_text)]
    assert labels[0] == ("attn_proj", T.CompletionItemKind.Function)
    assert labels.index(("ff_down", T.CompletionItemKind.Function)) > labels.index(("residual_ff", T.CompletionItemKind.Function))
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=doc_id(), position=find(SEED, "[role=$0embed]")))
    assert [i.label for i in res.items] == ["attention", "discretize", "embed", "kernel", "latent", "let", "observed",
                                          "pretrained"]
    assert res.items[0].text_edit.range == T.Range(start=find(SEED, "[role=$0embed]"), end=find(SEED, "[role=embed$0]"))


async def test_signature_help(client: LanguageClient):
    uri = "file:///tmp/qvr_e2e_sig.qvr"
    text = "object K : FinSet 2\nprogram p : K -> K\n    sample a <- Normal(0.0, "
    await open_doc(client, uri, text)
    res = await client.text_document_signature_help_async(T.SignatureHelpParams(
        text_document=doc_id(uri), position=position(text, len(text))))
    sig = res.signatures[res.active_signature]
    assert sig.label == "Normal(loc, scale)"
    assert res.active_parameter == 1 and sig.parameters[1].label == (12, 17)


async def test_inlay_hints(client: LanguageClient):
    res = await client.text_document_inlay_hint_async(T.InlayHintParams(
        text_document=doc_id(), range=T.Range(start=T.Position(line=0, character=0), end=T.Position(line=30, character=0))))
    assert [(h.position.line, h.position.character, h.label, h.kind) for h in res] == [
        (20, 9, ": Latent -> Latent", T.InlayHintKind.Type), (21, 12, ": Token -> Latent", T.InlayHintKind.Type),
        (24, 12, ": Latent", T.InlayHintKind.Type)]


async def test_semantic_tokens_full_and_range(client: LanguageClient):
    full = await client.text_document_semantic_tokens_full_async(T.SemanticTokensParams(text_document=doc_id()))
    assert len(full.data) % 5 == 0 and len(full.data) > 500
    rng = await client.text_document_semantic_tokens_range_async(T.SemanticTokensRangeParams(
        text_document=doc_id(), range=T.Range(start=T.Position(line=24, character=0), end=T.Position(line=25, character=0))))
    # `    sample h <- backbone`: keyword, variable+declaration, operator, function
    assert list(rng.data) == [24, 4, 6, 11, 0, 0, 7, 1, 6, 1, 0, 2, 2, 15, 0, 0, 3, 8, 8, 0]


async def test_folding_and_selection_ranges(client: LanguageClient):
    folds = await client.text_document_folding_range_async(T.FoldingRangeParams(text_document=doc_id()))
    assert [(f.start_line, f.end_line, f.kind) for f in folds] == [
        (0, 5, T.FoldingRangeKind.Comment), (23, 27, T.FoldingRangeKind.Region)]
    sel = await client.text_document_selection_range_async(T.SelectionRangeParams(
        text_document=doc_id(), positions=[find(SEED, "stack(lay$0er")]))
    chain = []
    node = sel[0]
    while node is not None:
        chain.append(span_text(SEED, node.range))
        node = node.parent
    assert chain[:3] == ["layer", "stack(layer, 2)", "tok_embed >> stack(layer, 2)"] and chain[-1] == SEED


async def test_code_actions(client: LanguageClient):
    uri = "file:///tmp/qvr_e2e_actions.qvr"
    text = "object Size : FinSet 3\nobject B : Siez\n"
    diags = await open_doc(client, uri, text)
    res = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=doc_id(uri), range=diags[-1].range, context=T.CodeActionContext(diagnostics=diags)))
    assert [(a.title, a.kind, a.is_preferred) for a in res] == [
        ("Change `Siez` to `Size`", T.CodeActionKind.QuickFix, True),
        ("Declare object `Siez`", T.CodeActionKind.QuickFix, None)]
    (edit,) = res[0].edit.changes[uri]
    assert (edit.new_text, span_text(text, edit.range)) == ("Size", "Siez")
    assert res[0].diagnostics[0].code == "QVR101"
    none = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=doc_id(uri), range=diags[-1].range,
        context=T.CodeActionContext(diagnostics=diags, only=[T.CodeActionKind.SourceOrganizeImports])))
    assert none is None

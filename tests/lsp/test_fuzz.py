"""Fuzzing the real server: hypothesis drives random incremental edit sequences over the
example files, with a random request after every edit.  Every request must be answered
(never with an internal error), the server must stay alive, and the diagnostics it
publishes for the final version must equal `qvr check --format json` on the final text
(ranges converted from code points to UTF-16).

Bounded: QVR_FUZZ_EXAMPLES examples (default 30) of at most 8 edits each, one server.
Inserted line ends are `\\n` or `\\r\\n`, never a lone `\\r` (whitespace in QVR, but a line
break in LSP).
"""
import atexit
import io
import json
import os
import shutil
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from lsp_support import EXAMPLES, RawClient, units

from qvr.cli import main as qvr_main

FILES = sorted(EXAMPLES.glob("*.qvr"))
TEXTS = {p.name: p.read_text(encoding="utf-8") for p in FILES}
#: the folder of both the server's documents and `qvr check`'s file: a program's messages
#: may name paths beside it (E10: the pretrained model folders tried for `model="..."`)
FOLDER = Path(tempfile.mkdtemp(prefix="qvr-fuzz-"))
atexit.register(shutil.rmtree, FOLDER, True)
PIECES = ["object ", "morphism ", "let ", "program ", "sample ", "observe ", "return ", "deduction ",
          " ", "\n", "    ", "\t", ">>", " >> ", "@", "(", ")", "[", "]", "=", "~", ":", "->", "<-", ",", "#",
          "## doc\n", "#{", "}#", '"', "é", "😋", "𝄞", "x", "h", "Token", "Latent", "1.0", "-", "fan(", "stack(",
          "role=", "[role=kernel]", "Normal", "Normal(0.0, 1.0)", "|-", "⊢", "atoms ", "rule r : ", "\f", "\u00a0",
          "\r\n"]
REQUESTS = ["textDocument/hover", "textDocument/completion", "textDocument/definition",
            "textDocument/references", "textDocument/documentHighlight", "textDocument/signatureHelp",
            "textDocument/prepareRename", "textDocument/rename", "textDocument/documentSymbol",
            "textDocument/semanticTokens/full", "textDocument/semanticTokens/range", "textDocument/foldingRange",
            "textDocument/selectionRange", "textDocument/inlayHint", "textDocument/codeAction"]


def lsp_pos(text: str, offset: int) -> dict:
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    return {"line": line, "character": units(text[start:offset])}


def check_json(text: str) -> list:
    """`qvr check --format json` on `text`, with ranges in UTF-16 (as the server reports)."""
    path = FOLDER / "final.qvr"
    path.write_text(text, encoding="utf-8")
    buf = io.StringIO()
    with redirect_stdout(buf):
        qvr_main(["check", "--format", "json", str(path)])
    lines = text.split("\n")
    out = []
    for d in json.loads(buf.getvalue())["files"][0]["diagnostics"]:
        r = d["range"]
        conv = [(p["line"], units(lines[p["line"]][:p["character"]]) if p["line"] < len(lines) else 0)
                for p in (r["start"], r["end"])]
        out.append((d["code"], d["message"], conv[0], conv[1]))
    return out


def server_view(diags: list) -> list:
    return [(d["code"], d["message"], (d["range"]["start"]["line"], d["range"]["start"]["character"]),
             (d["range"]["end"]["line"], d["range"]["end"]["character"])) for d in diags]


@pytest.fixture(scope="module")
def server():
    c = RawClient()
    caps = {"textDocument": {"completion": {"completionItem": {"snippetSupport": True}},
                             "rename": {"prepareSupport": True}}}
    resp = c.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": caps}, timeout=60)
    assert resp["result"]["capabilities"]["positionEncoding"] == "utf-16"
    c.notify("initialized", {})
    yield c
    c.close()


edit = st.tuples(st.floats(0, 1), st.integers(0, 12), st.lists(st.sampled_from(PIECES), max_size=4).map("".join))
scenario = st.tuples(st.sampled_from(sorted(TEXTS)),
                     st.lists(st.tuples(edit, st.sampled_from(REQUESTS), st.floats(0, 1), st.booleans()),
                              min_size=1, max_size=8))
_counter = [0]


@settings(max_examples=int(os.environ.get("QVR_FUZZ_EXAMPLES", "30")), deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenario)
def test_random_edits_keep_the_server_answering_and_in_sync_with_qvr_check(server, case):
    name, steps = case
    text = TEXTS[name]
    _counter[0] += 1
    uri = (FOLDER / f"fuzz_{_counter[0]}_{name}").as_uri()
    version = 1
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "qvr", "version": 1,
                                                            "text": text}})
    server.diagnostics(uri, 1)
    for (where, delete, insert), method, qwhere, batch in steps:
        start = int(where * len(text))
        end = min(len(text), start + delete)
        changes = [{"range": {"start": lsp_pos(text, start), "end": lsp_pos(text, end)}, "text": insert}]
        text = text[:start] + insert + text[end:]
        if batch:  # a second change in the same notification, relative to the first's result
            s2 = int(qwhere * len(text))
            changes.append({"range": {"start": lsp_pos(text, s2), "end": lsp_pos(text, s2)}, "text": "x"})
            text = text[:s2] + "x" + text[s2:]
        version += 1
        server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": changes})
        pos = lsp_pos(text, int(qwhere * len(text)))
        td = {"uri": uri}
        params = {"textDocument": td, "position": pos}
        if method == "textDocument/references":
            params["context"] = {"includeDeclaration": True}
        elif method == "textDocument/rename":
            params["newName"] = "renamed_x"
        elif method in ("textDocument/documentSymbol", "textDocument/semanticTokens/full",
                        "textDocument/foldingRange"):
            params = {"textDocument": td}
        elif method in ("textDocument/semanticTokens/range", "textDocument/inlayHint"):
            params = {"textDocument": td, "range": {"start": {"line": 0, "character": 0}, "end": pos}}
        elif method == "textDocument/selectionRange":
            params = {"textDocument": td, "positions": [pos]}
        elif method == "textDocument/codeAction":
            params = {"textDocument": td, "range": {"start": pos, "end": pos}, "context": {"diagnostics": []}}
        resp = server.request(method, params)
        err = resp.get("error")
        assert err is None or err["code"] == -32803, (method, err, text)
    published = server.diagnostics(uri, version)
    assert server_view(published) == check_json(text), text
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

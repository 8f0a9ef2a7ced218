"""The server over a real stdio pipe, as an editor starts it (pygls's own start-up and
reader): `initialize` split into pieces and with extra headers, a client that sends
something else first, `qvr lsp`, and hostile documents (nesting 10,000 deep, a 1 MB line,
NULs) on which the server keeps answering.  Nothing here waits for a time: every step
waits for the server's message."""
import json
import sys

import pytest
from jsonrpc_frames import frame
from lsp_support import SERVER, RawClient

CAPS_UTF8 = {"general": {"positionEncodings": ["utf-32", "utf-8", "utf-16"]},
             "textDocument": {"completion": {"completionItem": {"snippetSupport": True}}}}
HEAD = "object A : Real 3\nmorphism f : A -> A [role=kernel] ~ Normal\n"


@pytest.fixture
def clients():
    made = []

    def make(cmd=None):
        made.append(RawClient(cmd or SERVER))
        return made[-1]
    yield make
    for c in made:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(timeout=10)


def use_and_close(c: RawClient, uri="file:///tmp/stdio_t.qvr"):
    """initialized, didOpen -> diagnostics, hover, shutdown, exit: the session is normal."""
    c.notify("initialized", {})
    c.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "qvr", "version": 1, "text": "object A : Siez\nobject B : FinSet 2\n"}})
    assert [d["code"] for d in c.diagnostics(uri, 1)] == ["QVR101"]
    hover = c.request("textDocument/hover", {"textDocument": {"uri": uri},
                                             "position": {"line": 1, "character": 7}})
    assert "B : FinSet 2" in hover["result"]["contents"]["value"], hover
    assert c.request("shutdown", None)["result"] is None
    c.notify("exit", None)
    assert c.proc.wait(timeout=30) == 0


@pytest.mark.parametrize("headers", [b"", b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"])
def test_initialize_in_pieces_and_with_extra_headers(clients, headers):
    c = clients()
    data = frame({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                  "params": {"processId": None, "capabilities": CAPS_UTF8}}, headers)
    cuts = [0, 5, 18, len(data) - 40, len(data) - 1, len(data)]
    for a, b in zip(cuts, cuts[1:]):  # each piece flushed on its own
        c.proc.stdin.write(data[a:b])
        c.proc.stdin.flush()
    with c.cv:
        assert c.cv.wait_for(lambda: "init" in c.responses or c.proc.poll() is not None, 60)
        answer = c.responses.pop("init")
    assert answer["result"]["serverInfo"]["name"] == "qvr-lsp"
    assert answer["result"]["capabilities"]["positionEncoding"] == "utf-8"
    use_and_close(c)


def test_a_client_that_sends_something_else_first(clients):
    c = clients()
    early = c.request("workspace/symbol", {"query": "x"})
    assert early == {"jsonrpc": "2.0", "id": 1, "result": []}  # answered, nothing to find
    init = c.request("initialize", {"processId": None, "capabilities": {}})
    assert init["result"]["capabilities"]["positionEncoding"] == "utf-16"
    use_and_close(c)


def test_the_qvr_lsp_subcommand_serves_stdio(clients):
    c = clients([sys.executable, "-m", "qvr.cli", "lsp"])
    init = c.request("initialize", {"processId": None, "capabilities": {}})
    assert init["result"]["serverInfo"]["name"] == "qvr-lsp"
    use_and_close(c)


HOSTILE = {
    "fan_10000": (HEAD + "let deep = " + "fan(" * 10000 + "f" + ")" * 10000 + "\n", ["QVR010"]),
    "parens_1mb_line": (HEAD + "let deep = " + "(" * (1 << 19) + "f" + ")" * (1 << 19) + "\n", ["QVR010"]),
    "nuls": (HEAD + "let deep = f\x00 >> f\n\x00\x01\x7f\n", ["QVR002", "QVR002"]),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_server_keeps_answering_on_a_hostile_document(clients, name):
    bad, codes = HOSTILE[name]
    text = bad + "let after = f >> polsh\n"
    c = clients()
    c.request("initialize", {"processId": None, "capabilities": CAPS_UTF8})
    c.notify("initialized", {})
    uri = "file:///tmp/hostile_t.qvr"
    c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "qvr", "version": 1,
                                                       "text": text}})
    diags = c.diagnostics(uri, 1)
    assert [d["code"] for d in diags] == codes + ["QVR102"]
    last = text.count("\n") - 1  # the line of `let after = f >> polsh`
    on_f = {"textDocument": {"uri": uri}, "position": {"line": last, "character": len("let after = ")}}
    hover = c.request("textDocument/hover", on_f)
    assert hover["result"]["contents"] == {"kind": "plaintext",
                                           "value": "f : A -> A\nmorphism · role kernel ~ Normal"}
    definition = c.request("textDocument/definition", on_f)
    assert [d["range"]["start"] for d in definition["result"]] == [{"line": 1, "character": 9}]
    comp = c.request("textDocument/completion", {"textDocument": {"uri": uri},
                                                 "position": {"line": last, "character": len("let after = f >> ")}})
    assert "f" in {i["label"] for i in comp["result"]["items"]}
    in_bad = {"textDocument": {"uri": uri}, "position": {"line": 2, "character": 40}}
    for method in ("textDocument/hover", "textDocument/definition", "textDocument/completion",
                   "textDocument/signatureHelp", "textDocument/documentHighlight"):
        assert "error" not in c.request(method, in_bad), method
    for method in ("textDocument/documentSymbol", "textDocument/foldingRange",
                   "textDocument/semanticTokens/full", "textDocument/formatting"):
        params = {"textDocument": {"uri": uri}}
        if method == "textDocument/formatting":
            params["options"] = {"tabSize": 4, "insertSpaces": True}
        assert "error" not in c.request(method, params), method
    # fixing the document clears the deep statement's diagnostic
    end_line = bad.count("\n")
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
        {"range": {"start": {"line": 2, "character": 0}, "end": {"line": end_line, "character": 0}},
         "text": "let deep = f\n"}]})
    assert [d["code"] for d in c.diagnostics(uri, 2)] == ["QVR102"]
    c.close()

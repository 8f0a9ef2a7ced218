"""The fast start over stdio (`qvr_lsp.quickstart`): `initialize` is answered from a
snapshot of pygls's own answer while pygls is still loading, then the connection is handed
to pygls, which processes the same `initialize` (its duplicate answer dropped).

* the snapshot is exactly what the real server generates, and for every client profile of
  the end-to-end tests the early answer equals the real server's answer;
* framing, replay and the filtering writer, unit by unit;
* over a real stdio subprocess: the early answer (identical to a server without the fast
  path), then diagnostics, hover, shutdown and exit as usual; a client that sends something
  else first; `initialize` in chunks and with extra headers.
"""
import io
import itertools
import json
import subprocess
import sys
import threading
import time

import pytest
from lsp_support import CLIENT_PROFILES, SERVER, server_env
from lsprotocol import types as T
from pygls.io_ import run as pygls_run
from pygls.protocol import default_converter

from qvr_lsp import convert, quickstart as Q


def init_params(caps=None, **extra) -> dict:
    """InitializeParams as a pygls client puts them on the wire."""
    return default_converter().unstructure(T.InitializeParams(capabilities=caps or T.ClientCapabilities(), **extra))


def frame(msg, headers=b"") -> bytes:
    data = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n%s\r\n" % (len(data), headers) + data


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}}
NEXT = {"jsonrpc": "2.0", "method": "initialized", "params": {}}


# ---------------------------------------------------------------- the snapshot

def test_the_snapshot_is_what_the_real_server_generates():
    assert Q.load_snapshot() == Q.generate_snapshot()


EXTRA_CLIENTS = {
    "no capabilities": lambda: T.ClientCapabilities(),
    "bench/fuzz client (snippets, prepareRename)": lambda: default_converter().structure(
        {"textDocument": {"completion": {"completionItem": {"snippetSupport": True}},
                          "rename": {"prepareSupport": True}}}, T.ClientCapabilities),
    "flags false, notebooks": lambda: default_converter().structure(
        {"textDocument": {"rename": {"prepareSupport": False},
                          "synchronization": {"willSave": False, "willSaveWaitUntil": True}},
         "workspace": {"fileOperations": {"didCreate": False, "willRename": True}},
         "notebookDocument": {"synchronization": {}},
         "general": {"positionEncodings": ["ebcdic", "utf-32", "utf-16"]}}, T.ClientCapabilities),
}


@pytest.mark.parametrize("profile", list(CLIENT_PROFILES) + list(EXTRA_CLIENTS))
def test_the_early_answer_is_the_real_servers_answer(profile):
    make, encoding = CLIENT_PROFILES.get(profile, (EXTRA_CLIENTS.get(profile), None))
    for extra in ({}, {"root_uri": "file:///tmp/ws", "process_id": 42, "trace": T.TraceValue.Verbose,
                       "workspace_folders": [T.WorkspaceFolder(uri="file:///tmp/ws", name="ws")],
                       "client_info": T.ClientInfo(name="editor", version="1")}):
        params = init_params(make(), **extra)
        early = Q.initialize_result(params)
        assert early is not None
        assert early == Q.real_initialize_response(params)["result"]
        if encoding is not None:
            assert early["capabilities"]["positionEncoding"] == encoding


def test_position_encoding_negotiation_agrees_with_the_real_server():
    names = ["utf-8", "utf-16", "utf-32", "ebcdic"]
    offers = [None] + [list(p) for k in range(len(names) + 1) for p in itertools.permutations(names, k)]
    for offered in offers:
        assert Q.choose_encoding(offered) == convert.choose_encoding(offered)
    for offered in [None, [], ["utf-32"], ["utf-32", "utf-16"], ["utf-16", "utf-32", "utf-8"], ["ebcdic"],
                    ["ebcdic", "utf-32"]]:
        params = init_params(T.ClientCapabilities(general=T.GeneralClientCapabilities(position_encodings=offered)))
        early = Q.initialize_result(params)
        assert early == Q.real_initialize_response(params)["result"], offered


@pytest.mark.parametrize("params", [
    None, [], {}, {"processId": None},
    {"processId": "x", "capabilities": {}},
    {"processId": True, "capabilities": {}},
    {"processId": None, "capabilities": {"workspace": 3}},
    {"processId": None, "capabilities": {"textDocument": {"rename": {"prepareSupport": "yes"}}}},
    {"processId": None, "capabilities": {"textDocument": {"rename": []}}},
    {"processId": None, "capabilities": {"general": {"positionEncodings": ["utf-8", 7]}}},
    {"processId": None, "capabilities": {"general": {"positionEncodings": "utf-8"}}},
    {"processId": None, "capabilities": {"notebookDocument": True}},
    {"processId": None, "capabilities": {}, "trace": "bogus"},
    {"processId": None, "capabilities": {}, "rootUri": 5},
    {"processId": None, "capabilities": {}, "workspaceFolders": [{"uri": "file:///x"}]},
    {"processId": None, "capabilities": {}, "clientInfo": {"version": "1"}},
])
def test_doubtful_params_get_no_early_answer(params):
    assert Q.initialize_result(params) is None


@pytest.mark.parametrize("message", [
    {"jsonrpc": "2.0", "method": "initialize", "params": {"capabilities": {}}},  # a notification
    {"jsonrpc": "2.0", "id": None, "method": "initialize", "params": {"capabilities": {}}},
    {"jsonrpc": "2.0", "id": True, "method": "initialize", "params": {"capabilities": {}}},
    {"jsonrpc": "1.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
    {"jsonrpc": "2.0", "id": 1, "method": "shutdown"},
    [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}],  # a batch
    None,
])
def test_only_an_initialize_request_is_answered_early(message):
    assert Q.eager_answer(message, Q.load_snapshot()) is None


def test_without_a_snapshot_nothing_is_answered_early(tmp_path):
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    for path in (tmp_path / "missing.json", tmp_path / "broken.json"):
        assert Q.load_snapshot(path) is None
    assert Q.eager_answer(INIT, None) is None


def test_request_ids_are_echoed():
    for rid in (0, 7, "init-1"):
        got = Q.eager_answer({"jsonrpc": "2.0", "id": rid, "method": "initialize",
                              "params": {"processId": None, "capabilities": {}}}, Q.load_snapshot())
        assert got is not None and got[0] == rid


# ---------------------------------------------------------------- framing, replay, filtering

@pytest.mark.parametrize("headers", [b"", b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"])
def test_read_frame_reads_one_message_and_leaves_the_rest(headers):
    first = frame(INIT, headers)
    stream = io.BufferedReader(io.BytesIO(first + frame(NEXT)))
    got = Q.read_frame(stream)
    assert got.raw == first and got.message == INIT
    assert stream.read() == frame(NEXT)


def test_read_frame_with_a_header_before_content_length():
    data = json.dumps(INIT).encode()
    first = b"Content-Type: application/vscode-jsonrpc\r\nContent-Length: %d\r\n\r\n" % len(data) + data
    got = Q.read_frame(io.BytesIO(first + frame(NEXT)))
    assert got.raw == first and got.message == INIT


@pytest.mark.parametrize("data", [
    b"", b"Content-Length: 10\r\n", b"Content-Length: 10\r\n\r\n{\"a\"",  # the stream ends early
    b"Content-Length: 5\r\n\r\nnope!",  # not JSON
    b"content-length: 5\r\n\r\n{}   ",  # a header pygls's reader does not recognise either
])
def test_read_frame_without_a_message_keeps_every_byte(data):
    got = Q.read_frame(io.BytesIO(data))
    assert got.message is None and got.raw == data


class Protocol:
    """What pygls's reader loop needs of a protocol: record every message."""

    def __init__(self, stop):
        self.messages, self.stop = [], stop

    def structure_message(self, data):
        return data

    def handle_message(self, message):
        self.messages.append(message)


def test_pygls_reads_the_replayed_message_then_the_stream():
    first = frame(INIT, b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n")
    rest = frame(NEXT) + frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    stream = io.BufferedReader(io.BytesIO(first + rest))
    got = Q.read_frame(stream)
    drained = []
    proto = Protocol(threading.Event())
    reader = Q.ReplayReader(got.raw, stream, on_drained=lambda: drained.append(len(proto.messages)))
    pygls_run(stop_event=proto.stop, reader=reader, protocol=proto)
    assert proto.messages == [INIT, NEXT, {"jsonrpc": "2.0", "id": 2, "method": "shutdown"}]
    assert drained == [1]  # once, right after the replayed initialize was handled


def test_replay_reader_across_the_boundary():
    r = Q.ReplayReader(b"ab\ncd", io.BytesIO(b"ef\ngh"))
    assert r.readline() == b"ab\n" and r.readline() == b"cdef\n" and r.read(2) == b"gh" and r.read(1) == b""
    r = Q.ReplayReader(b"abc", io.BytesIO(b"def"))
    assert r.read(2) == b"ab" and r.read(3) == b"cde" and r.read() == b"f"
    r = Q.ReplayReader(b"abc", io.BytesIO(b"def"))
    assert r.read() == b"abcdef"


class Sink(io.BytesIO):
    def messages(self):
        out, data = [], self.getvalue()
        while data:
            head, _, rest = data.partition(b"\r\n\r\n")
            n = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            out.append(json.loads(rest[:n]))
            data = rest[n:]
        return out


def test_the_filter_drops_exactly_pygls_answer_to_the_initialize_request():
    result = Q.initialize_result(INIT["params"])
    sink, logged = Sink(), []
    w = Q.InitializeFilter(sink, 1, result, log=lambda _w, text: logged.append(text))
    note = {"jsonrpc": "2.0", "method": "window/logMessage", "params": {"type": 4, "message": "hi"}}
    other = {"jsonrpc": "2.0", "id": "1", "result": None}  # another id: a string
    w.write(Q.encode(note))
    w.write(Q.encode(other))
    w.write(Q.encode({"id": 1, "jsonrpc": "2.0", "result": result}))
    assert w.dropped and not logged
    again = {"id": 1, "jsonrpc": "2.0", "result": None}
    w.write(Q.encode(again))  # only once
    w.check_answered()
    assert sink.messages() == [note, other, again] and not logged


def test_the_filter_reports_a_different_answer_and_a_missing_one():
    logged = []
    w = Q.InitializeFilter(Sink(), 1, {"capabilities": {}}, log=lambda _w, text: logged.append(text))
    w.write(Q.encode({"id": 1, "jsonrpc": "2.0", "error": {"code": -32602, "message": "bad"}}))
    assert w.dropped and "differs" in logged[0]
    w = Q.InitializeFilter(Sink(), 1, {"capabilities": {}}, log=lambda _w, text: logged.append(text))
    w.check_answered()
    assert "did not answer" in logged[1]


def test_the_filter_logs_to_the_client_too(capsys):
    sink = Sink()
    w = Q.InitializeFilter(sink, 1, {"capabilities": {}})
    w.check_answered()
    assert "did not answer" in capsys.readouterr().err
    [msg] = sink.messages()
    assert msg["method"] == "window/logMessage" and msg["params"]["type"] == 1


def test_the_fast_path_imports_neither_pygls_nor_lsprotocol():
    code = ("import sys, io\nimport qvr_lsp.__main__, qvr_lsp.quickstart as Q\n"
            "Q.initialize_result({'processId': None, 'capabilities': {}})\n"
            "Q.read_frame(io.BytesIO(b''))\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pygls', 'lsprotocol', 'cattrs', 'attrs', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], env=server_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- over a real stdio subprocess

class Session:
    """A raw stdio session with the server that keeps the whole transcript, in order."""

    def __init__(self, cmd=None, **env):
        self.proc = subprocess.Popen(cmd or SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=server_env(QVR_LSP_DEBUG_START="1", **env))
        self.t0 = time.perf_counter()
        self.cv = threading.Condition()
        self.transcript: list = []  # (seconds since start, message)
        self.stderr: list = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(
            l.decode("utf-8", "replace") for l in self.proc.stderr), daemon=True).start()

    def _read(self):
        out = self.proc.stdout
        while True:
            body = Q.read_frame(out).message
            if body is None:  # the server closed its output (or sent no JSON)
                with self.cv:
                    self.cv.notify_all()
                return
            with self.cv:
                if "id" in body and "method" in body:  # a server->client request: answer null
                    self.send({"jsonrpc": "2.0", "id": body["id"], "result": None})
                self.transcript.append((time.perf_counter() - self.t0, body))
                self.cv.notify_all()

    def write(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg, headers=b""):
        self.write(frame(msg, headers))

    def wait(self, pred, timeout=60.0):
        with self.cv:
            if not self.cv.wait_for(lambda: any(pred(m) for _, m in self.transcript) or self.proc.poll() is not None,
                                    timeout):
                raise TimeoutError(f"stderr: {''.join(self.stderr)[-2000:]}")
            for _, m in self.transcript:
                if pred(m):
                    return m
        raise RuntimeError(f"server died: {''.join(self.stderr)[-2000:]}")

    def response(self, rid, timeout=60.0):
        return self.wait(lambda m: m.get("id") == rid and "method" not in m, timeout)

    def responses(self, rid):
        with self.cv:
            return [m for _, m in self.transcript if m.get("id") == rid and "method" not in m]

    def use_and_close(self, uri="file:///tmp/quickstart_t.qvr"):
        """initialized, didOpen -> diagnostics, hover, shutdown, exit: the session is normal."""
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        self.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "qvr", "version": 1, "text": "object A : Siez\nobject B : FinSet 2\n"}}})
        diags = self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                          and m["params"]["uri"] == uri)["params"]["diagnostics"]
        assert [d["code"] for d in diags] == ["QVR101"]
        self.send({"jsonrpc": "2.0", "id": 90, "method": "textDocument/hover",
                   "params": {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 7}}})
        hover = self.response(90)
        assert "B : FinSet 2" in hover["result"]["contents"]["value"], hover
        self.send({"jsonrpc": "2.0", "id": 91, "method": "shutdown"})
        assert self.response(91) == {"jsonrpc": "2.0", "id": 91, "result": None}
        self.send({"jsonrpc": "2.0", "method": "exit"})
        assert self.proc.wait(timeout=30) == 0
        err = "".join(self.stderr)
        assert "differs" not in err and "did not answer" not in err, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def session():
    made = []

    def make(cmd=None, **env):
        made.append(Session(cmd, **env))
        return made[-1]
    yield make
    for s in made:
        s.kill()


def _debug_lines(s: Session) -> list:
    return [l.split(": ", 1)[1].strip() for l in s.stderr if l.startswith("qvr-lsp start")]


def test_initialize_is_answered_early_then_the_session_is_normal(session):
    params = init_params(CLIENT_PROFILES["visual-studio-code"][0]())
    plain = session(QVR_LSP_EAGER_INITIALIZE="0")  # pygls alone, for reference
    plain.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    fast = session()
    fast.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    answer = fast.response(1)
    assert answer == plain.response(1)
    assert answer["result"]["capabilities"]["positionEncoding"] == "utf-16"
    fast.use_and_close()
    plain.use_and_close()
    assert len(fast.responses(1)) == 1  # pygls's own answer was dropped
    log = _debug_lines(fast)
    assert log[:3] == ["initialize 1 answered early", "pygls server built", "handing over to pygls"], log


def test_qvr_lsp_subcommand_answers_early_too(session):
    s = session([sys.executable, "-m", "qvr.cli", "lsp"])
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params()})
    assert s.response(1)["result"] == Q.initialize_result(init_params())
    s.use_and_close()
    assert _debug_lines(s)[0] == "initialize 1 answered early"


def test_a_client_that_sends_something_else_first(session):
    s = session()
    s.send({"jsonrpc": "2.0", "id": 0, "method": "workspace/symbol", "params": {"query": "x"}})
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params()})
    assert len(s.response(0)) and "capabilities" in s.response(1)["result"]
    s.use_and_close()
    assert len(s.responses(0)) == 1 and len(s.responses(1)) == 1
    assert _debug_lines(s)[0] == "first message not answered early"


@pytest.mark.parametrize("first", [
    b"Content-Length: 9\r\n\r\nnot json!",
    frame({"jsonrpc": "2.0", "method": "initialize", "params": {"capabilities": {}}}),  # no id
    frame({"jsonrpc": "2.0", "id": 7, "method": "initialize",  # params pygls accepts, but no early answer
           "params": {"processId": None, "capabilities": {"textDocument": {"rename": {"prepareSupport": "yes"}}}}}),
])
def test_a_broken_first_message_is_left_to_pygls(session, first):
    s = session()
    s.write(first)
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params()})
    assert s.response(1)["result"]["serverInfo"]["name"] == "qvr-lsp"
    s.use_and_close()
    assert _debug_lines(s)[0] == "first message not answered early"
    assert len(s.responses(1)) == 1 and len(s.responses(7)) <= 1


@pytest.mark.parametrize("headers,before", [
    (b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n", False),
    (b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n", True),
    (b"", False),
])
def test_initialize_in_chunks_and_with_extra_headers(session, headers, before):
    params = init_params(CLIENT_PROFILES["emacs@29.1 (offers utf-32, utf-8, utf-16)"][0]())
    body = json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params}).encode()
    head = b"Content-Length: %d\r\n" % len(body)
    data = (headers + head if before else head + headers) + b"\r\n" + body
    s = session()
    cuts = [0, len(head) - 3, len(head) + len(headers) + 1, len(data) - len(body) // 2, len(data)]
    for a, b in zip(cuts, cuts[1:]):
        s.write(data[a:b])
        time.sleep(0.15)
    answer = s.response("init")
    assert answer["result"] == Q.real_initialize_response(params, "init")["result"]
    assert answer["result"]["capabilities"]["positionEncoding"] == "utf-8"
    s.use_and_close()
    assert len(s.responses("init")) == 1
    assert _debug_lines(s)[0] == "initialize 'init' answered early"

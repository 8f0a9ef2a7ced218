"""Fast start over stdio: answer `initialize` before pygls has finished loading.

Importing pygls and lsprotocol costs about a second of CPU (thousands of attrs classes),
while an editor waits for the `initialize` response before it does anything.  So in stdio
mode `serve_stdio`:

1. starts a thread that imports pygls and builds the real server (`server.build_server`);
2. meanwhile reads the first LSP message from stdin itself, with the same framing rules as
   pygls's reader (`read_frame`), and parses it with plain `json`;
3. if it is a well-formed `initialize` request, answers it at once with `initialize_result`:
   the `InitializeResult` pygls would send, taken from `initialize_result.json`, a snapshot
   of the real server's answer generated at development time, with the client-dependent
   parts (position encoding, the shape of `renameProvider`) filled in from the params;
4. hands the connection to pygls: a `ReplayReader` first replays the bytes already read and
   then continues with stdin, so pygls processes that `initialize` like any other and sets
   up its state (client capabilities, workspace, position encoding); an `InitializeFilter`
   writer drops exactly pygls's own response to that request id (comparing it with the
   early one, and logging any difference).  Everything after that is plain pygls.

If the first message is anything else (or the params look like something pygls could
reject), nothing is answered early: the bytes are replayed and pygls does the rest.

This module imports neither pygls nor lsprotocol at import time (only the development
helpers `real_initialize_response` / `generate_snapshot` do).  Regenerate the snapshot
after changing registered features, options or the pygls version:

    PYTHONPATH=.:lsp .venv/bin/python -m qvr_lsp.quickstart --write

`tests/lsp/test_quickstart.py` fails if the snapshot differs from what the real server
answers.  `QVR_LSP_EAGER_INITIALIZE=0` turns the early answer off; `QVR_LSP_DEBUG_START=1`
logs the start-up timeline to stderr.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

SNAPSHOT = Path(__file__).with_name("initialize_result.json")
UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"
CONTENT_TYPE = b"application/vscode-jsonrpc; charset=utf-8"
# pygls's reader (pygls.io_.run_async) recognises exactly this header line
CONTENT_LENGTH = re.compile(rb"^Content-Length: (\d+)\r\n$")
_T0 = time.perf_counter()


# ---------------------------------------------------------------- position encoding

def choose_encoding(offered) -> str:
    """UTF-16 by default; UTF-8 whenever the client offers it; UTF-32 only if it is all the
    client offers.  (`convert.choose_encoding` is this, as an lsprotocol enum.)"""
    offered = list(offered or ())
    if UTF8 in offered:
        return UTF8
    if not offered or UTF16 in offered:
        return UTF16
    if UTF32 in offered:
        return UTF32
    return UTF16


# ---------------------------------------------------------------- the early answer

def load_snapshot(path: Path = SNAPSHOT) -> Optional[dict]:
    try:
        snap = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(snap.get("result"), dict) and isinstance(snap.get("switches"), list):
            return snap
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _opt(x, *types) -> bool:
    return x is None or isinstance(x, types)


def _lookup(caps: dict, path) -> tuple[bool, Any]:
    """(ok, value) of a dotted client capability; ok is False when a container on the way is
    not an object (pygls might reject such params: no early answer then)."""
    node: Any = caps
    for key in path:
        if node is None:
            return True, None
        if not isinstance(node, dict):
            return False, None
        node = node.get(key)
    return True, node


def _params_ok(params) -> bool:
    """The parts of InitializeParams that pygls's converter checks and that a client could
    plausibly get wrong; anything doubtful gets no early answer (pygls answers instead)."""
    if not isinstance(params, dict) or not isinstance(params.get("capabilities"), dict):
        return False
    if not (params.get("processId") is None or _is_int(params.get("processId"))):
        return False
    if not all(_opt(params.get(k), str) for k in ("rootUri", "rootPath", "locale")):
        return False
    if params.get("trace") not in (None, "off", "messages", "verbose"):
        return False
    info = params.get("clientInfo")
    if not (info is None or (isinstance(info, dict) and isinstance(info.get("name"), str)
                             and _opt(info.get("version"), str))):
        return False
    folders = params.get("workspaceFolders")
    if folders is not None and not (isinstance(folders, list) and all(
            isinstance(f, dict) and isinstance(f.get("uri"), str) and isinstance(f.get("name"), str)
            for f in folders)):
        return False
    return True


def _state(kind: str, value):
    """The state of a consulted client capability: None (absent or null), True/False for a
    flag, "present" for an object; raises ValueError for a value of the wrong type."""
    if value is None:
        return None
    if kind == "flag" and isinstance(value, bool):
        return value
    if kind == "object" and isinstance(value, dict):
        return "present"
    raise ValueError(value)


def _set_in(node: dict, path, value) -> None:
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _unset_in(node: dict, path) -> None:
    for key in path[:-1]:
        node = node.get(key)
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


def initialize_result(params, snapshot: Optional[dict] = None) -> Optional[dict]:
    """The `InitializeResult` (as JSON) the real server answers to these `initialize`
    params, or None when the params are not ones this function can vouch for."""
    snap = snapshot if snapshot is not None else load_snapshot()
    if snap is None or not _params_ok(params):
        return None
    caps_in = params["capabilities"]
    ok, offered = _lookup(caps_in, ("general", "positionEncodings"))
    if not ok or not (offered is None or (isinstance(offered, list) and all(isinstance(e, str) for e in offered))):
        return None
    states = {}
    for path, kind in snap.get("consulted", []):
        ok, value = _lookup(caps_in, path)
        try:
            if not ok:
                raise ValueError(path)
            states[tuple(path)] = _state(kind, value)
        except ValueError:
            return None
    result = json.loads(json.dumps(snap["result"]))  # a deep copy
    caps = result["capabilities"]
    caps["positionEncoding"] = choose_encoding(offered)
    for sw in snap["switches"]:
        if states.get(tuple(sw["when"])) == sw["state"] and states.get(tuple(sw["when"])) is not None:
            for path in sw["unset"]:
                _unset_in(caps, path)
            for path, value in sw["set"]:
                _set_in(caps, path, value)
    return result


def eager_answer(message, snapshot: Optional[dict]) -> Optional[tuple[Any, dict]]:
    """(request id, result) when `message` is an `initialize` request to answer early."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "initialize":
        return None
    rid = message.get("id")
    if not (_is_int(rid) or isinstance(rid, str)):
        return None
    result = initialize_result(message.get("params"), snapshot) if snapshot is not None else None
    return None if result is None else (rid, result)


def encode(message: dict) -> bytes:
    """One framed message, with the headers pygls writes."""
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\nContent-Type: %s\r\n\r\n%s" % (len(body), CONTENT_TYPE, body)


# ---------------------------------------------------------------- framing

class Frame:
    """The bytes of the first message as read (`raw`), and its JSON (`message`, None when
    the stream ended early or the body is not JSON)."""

    def __init__(self, raw: bytes, message=None):
        self.raw, self.message = raw, message


def read_frame(stream) -> Frame:
    """Read one message the way pygls's reader does (`pygls.io_.run_async`): header lines up
    to a blank line once a `Content-Length: N\\r\\n` line has been seen, other headers
    ignored; then N bytes of body."""
    raw = bytearray()
    length = 0
    while True:
        line = stream.readline()
        if not line:
            return Frame(bytes(raw))
        raw += line
        if not length:
            match = CONTENT_LENGTH.fullmatch(line)
            if match:
                length = int(match.group(1))
        if length and not line.strip():
            body = stream.read(length)
            raw += body
            if len(body) < length:
                return Frame(bytes(raw))
            try:
                return Frame(bytes(raw), json.loads(body))
            except ValueError:
                return Frame(bytes(raw))


class ReplayReader:
    """A binary reader that returns `replay` first, then continues with `stream`.
    `on_drained` is called once, when the first read reaches `stream`."""

    def __init__(self, replay: bytes, stream, on_drained=None):
        self._buf, self._pos = bytes(replay), 0
        self._stream = stream
        self._on_drained = on_drained

    def _drained(self):
        if self._on_drained is not None:
            callback, self._on_drained = self._on_drained, None
            callback()

    def readline(self, size: int = -1) -> bytes:
        if self._pos < len(self._buf):
            end = self._buf.find(b"\n", self._pos)
            if end >= 0 and (size is None or size < 0 or end + 1 - self._pos <= size):
                line, self._pos = self._buf[self._pos:end + 1], end + 1
                return line
            if size is not None and size >= 0 and len(self._buf) - self._pos >= size:
                line, self._pos = self._buf[self._pos:self._pos + size], self._pos + size
                return line
            line, self._pos = self._buf[self._pos:], len(self._buf)
            self._drained()
            more = size - len(line) if size is not None and size >= 0 else -1
            return line + self._stream.readline(more)
        self._drained()
        return self._stream.readline(size)

    def read(self, n: int = -1) -> bytes:
        if self._pos < len(self._buf):
            stop = len(self._buf) if n is None or n < 0 else min(len(self._buf), self._pos + n)
            part, self._pos = self._buf[self._pos:stop], stop
            if n is None or n < 0:
                self._drained()
                return part + self._stream.read()
            if len(part) < n:
                self._drained()
                part += self._stream.read(n - len(part))
            return part
        self._drained()
        return self._stream.read(n)

    def close(self):
        self._stream.close()


class InitializeFilter:
    """The writer pygls gets after an early answer: drops pygls's own response to the
    `initialize` request `rid` (once), checks that it equals the `result` already sent, and
    passes every other message through."""

    def __init__(self, stream, rid, result: dict, log=None):
        self._stream = stream
        self._rid, self._result = rid, result
        self._log = log or _log_error
        self.dropped = False
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        if not self.dropped:
            with self._lock:
                if not self.dropped and self._take(data):
                    return
        self._stream.write(data)

    def _take(self, data: bytes) -> bool:
        _, sep, body = bytes(data).partition(b"\r\n\r\n")
        try:
            msg = json.loads(body) if sep else None
        except ValueError:
            return False
        if not (isinstance(msg, dict) and "method" not in msg and msg.get("id") == self._rid
                and type(msg.get("id")) is type(self._rid)):
            return False
        self.dropped = True
        if "error" in msg or msg.get("result") != self._result:
            self._log(self, "qvr-lsp: the early initialize response differs from pygls's "
                            f"(regenerate qvr_lsp/initialize_result.json): pygls answered {json.dumps(msg)[:2000]}")
        return True

    def check_answered(self) -> None:
        """Called once pygls has read past the replayed `initialize`: it must have answered."""
        if not self.dropped:
            self._log(self, "qvr-lsp: pygls did not answer the initialize request that was answered "
                            "early (it rejected the params?): the server is not initialized")

    def raw_write(self, data: bytes) -> None:
        self._stream.write(data)
        self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()


def _log_error(writer: InitializeFilter, text: str) -> None:
    print(text, file=sys.stderr, flush=True)
    try:
        writer.raw_write(encode({"jsonrpc": "2.0", "method": "window/logMessage",
                                 "params": {"type": 1, "message": text}}))
    except Exception:  # pragma: no cover - the client is gone
        pass


# ---------------------------------------------------------------- serving

def enabled() -> bool:
    return os.environ.get("QVR_LSP_EAGER_INITIALIZE", "1").strip().lower() not in ("0", "false", "no", "off")


def _debug(text: str) -> None:
    if os.environ.get("QVR_LSP_DEBUG_START"):
        print(f"qvr-lsp start {time.perf_counter() - _T0:.3f}s: {text}", file=sys.stderr, flush=True)


class _Loader(threading.Thread):
    """Imports pygls and builds the server in the background."""

    def __init__(self):
        super().__init__(name="qvr-lsp-load", daemon=True)
        self.server = None
        self.error: Optional[BaseException] = None

    def run(self):
        try:
            from qvr_lsp.server import build_server
            self.server = build_server()
            _debug("pygls server built")
        except BaseException as exc:  # re-raised in the main thread
            self.error = exc

    def result(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.server


def serve_stdio(stdin=None, stdout=None) -> int:
    """Run the server over stdio, answering `initialize` early (see the module docstring)."""
    import importlib.util

    if importlib.util.find_spec("pygls") is None:  # fail as before: nothing answered
        raise ModuleNotFoundError("No module named 'pygls'", name="pygls")
    stdin = stdin if stdin is not None else sys.stdin.buffer
    stdout = stdout if stdout is not None else sys.stdout.buffer
    loader = _Loader()
    loader.start()
    snapshot = load_snapshot()
    if snapshot is None:
        print(f"qvr-lsp: {SNAPSHOT.name} is missing or unreadable: initialize is answered by pygls",
              file=sys.stderr, flush=True)
    frame = read_frame(stdin)
    answer = eager_answer(frame.message, snapshot)
    writer = stdout
    on_drained = None
    if answer is not None:
        rid, result = answer
        try:
            stdout.write(encode({"id": rid, "jsonrpc": "2.0", "result": result}))
            stdout.flush()
        except (BrokenPipeError, OSError):  # the client is gone
            return 0
        writer = InitializeFilter(stdout, rid, result)
        on_drained = writer.check_answered
        _debug(f"initialize {rid!r} answered early")
    else:
        _debug("first message not answered early")
    server = loader.result()
    _debug("handing over to pygls")
    server.start_io(ReplayReader(frame.raw, stdin, on_drained), writer)
    return 0


# ---------------------------------------------------------------- development: the snapshot

# Client capabilities pygls's `ServerCapabilitiesBuilder` consults (pygls/capabilities.py):
# "flag", a boolean (absent, false and true can each give a different answer), or "object"
# (only whether it is there matters).
CONSULTED = [
    (("textDocument", "synchronization", "willSave"), "flag"),
    (("textDocument", "synchronization", "willSaveWaitUntil"), "flag"),
    (("textDocument", "rename", "prepareSupport"), "flag"),
    (("workspace", "fileOperations", "didCreate"), "flag"),
    (("workspace", "fileOperations", "willCreate"), "flag"),
    (("workspace", "fileOperations", "didRename"), "flag"),
    (("workspace", "fileOperations", "willRename"), "flag"),
    (("workspace", "fileOperations", "didDelete"), "flag"),
    (("workspace", "fileOperations", "willDelete"), "flag"),
    (("notebookDocument",), "object"),
]
_OBJECT_PROBE = {"synchronization": {"dynamicRegistration": True, "executionSummarySupport": True}}


def real_initialize_response(params: dict, rid: Any = 1) -> dict:
    """The JSON response the real pygls server (`build_server()`) sends to an `initialize`
    request with these params, computed in-process.  Development and tests only: imports
    pygls."""
    from qvr_lsp.server import build_server

    server = build_server(faults=set())
    protocol = server.protocol
    sent: list = []

    class Capture:
        def write(self, data):
            sent.append(bytes(data))

        def close(self):
            pass

    protocol.set_writer(Capture())
    request = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params})
    protocol.handle_message(json.loads(request, object_hook=protocol.structure_message))
    for data in sent:
        msg = json.loads(data.partition(b"\r\n\r\n")[2])
        if "method" not in msg and msg.get("id") == rid:
            return msg
    raise RuntimeError(f"pygls sent no response to initialize: {sent!r}")


def _nest(path, value) -> dict:
    out: Any = value
    for key in reversed(path):
        out = {key: out}
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _diff(base: dict, new: dict, prefix=()) -> tuple[list, list]:
    """(set, unset): the leaves of `new` that differ from `base`, as [path, value], and the
    paths of `base` missing from `new`."""
    sets, unsets = [], []
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            s, u = _diff(base[k], v, prefix + (k,))
            sets += s
            unsets += u
        elif k not in base or base[k] != v:
            sets.append([list(prefix + (k,)), v])
    unsets += [list(prefix + (k,)) for k in base if k not in new]
    return sets, unsets


def generate_snapshot() -> dict:
    """Recompute the snapshot from the real server: its answer to a client with no
    capabilities, plus, for each state of each consulted client capability that changes the
    answer, what it sets or removes in the server capabilities.  Raises if the answer
    depends on the client in a way the snapshot cannot express."""
    from importlib.metadata import version

    def result(caps):
        msg = real_initialize_response({"processId": None, "rootUri": None, "capabilities": caps})
        if "result" not in msg:
            raise RuntimeError(f"pygls answered initialize with an error: {msg}")
        return msg["result"]

    base = result({})
    if base["capabilities"].get("positionEncoding") != UTF16:
        raise RuntimeError(f"default position encoding is {base['capabilities'].get('positionEncoding')!r}")
    switches = []
    for path, kind in CONSULTED:
        for value in ([True, False] if kind == "flag" else [_OBJECT_PROBE]):
            got = result(_nest(path, value))
            if {k: v for k, v in got.items() if k != "capabilities"} != \
                    {k: v for k, v in base.items() if k != "capabilities"}:
                raise RuntimeError(f"{'.'.join(path)} changes more than the capabilities")
            sets, unsets = _diff(base["capabilities"], got["capabilities"])
            if sets or unsets:
                switches.append({"when": list(path), "state": _state(kind, value), "set": sets, "unset": unsets})
    snap = {
        "comment": "Generated by `python -m qvr_lsp.quickstart --write` from the real pygls server "
                   "(qvr_lsp.quickstart.generate_snapshot); do not edit by hand.",
        "pygls": version("pygls"), "lsprotocol": version("lsprotocol"),
        "result": base, "consulted": [[list(p), k] for p, k in CONSULTED], "switches": switches,
    }
    # the switches must compose: every consulted capability at once, each way
    for flag, encodings in ((True, [UTF16, UTF8]), (False, [UTF32])):
        caps: dict = {"general": {"positionEncodings": encodings}}
        for path, kind in CONSULTED:
            caps = _merge(caps, _nest(path, flag if kind == "flag" else _OBJECT_PROBE))
        params = {"processId": None, "rootUri": None, "capabilities": caps}
        if initialize_result(params, snap) != result(caps):
            raise RuntimeError("the client-dependent parts of the initialize result do not compose: "
                               "extend qvr_lsp.quickstart")
    return snap


def write_snapshot(path: Path = SNAPSHOT) -> dict:
    snap = generate_snapshot()
    path.write_text(json.dumps(snap, indent=1) + "\n", encoding="utf-8")
    return snap


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m qvr_lsp.quickstart",
                                description="Regenerate or check qvr_lsp/initialize_result.json")
    p.add_argument("--write", action="store_true", help="rewrite the snapshot from the real server")
    args = p.parse_args(argv)
    if args.write:
        write_snapshot()
        print(f"wrote {SNAPSHOT}")
        return 0
    ok = load_snapshot() == generate_snapshot()
    print(f"{SNAPSHOT.name}: {'up to date' if ok else 'STALE (run with --write)'}")
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

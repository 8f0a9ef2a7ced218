"""Shared helpers for the language-server tests: how to start the server, and LSP
positions computed independently of the server (by encoding the text)."""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from lsprotocol import types

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SERVER = [sys.executable, "-m", "qvr_lsp"]


def _utf8_client():
    import pytest_lsp
    caps = pytest_lsp.client_capabilities("visual-studio-code")
    caps.general.position_encodings = ["utf-16", "utf-8"]
    return caps


def _utf32_client():
    import pytest_lsp
    caps = pytest_lsp.client_capabilities("visual-studio-code")
    caps.general.position_encodings = ["utf-32"]
    return caps


def _profile(name):
    def make():
        import pytest_lsp
        return pytest_lsp.client_capabilities(name)
    return make


# The client capability profiles of the end-to-end tests: name -> (make ClientCapabilities,
# the position encoding the server must negotiate).
CLIENT_PROFILES = {
    "visual-studio-code": (_profile("visual-studio-code"), "utf-16"),
    "neovim@0.7.0": (_profile("neovim@0.7.0"), "utf-16"),
    "emacs@29.1 (offers utf-32, utf-8, utf-16)": (_profile("emacs@29.1"), "utf-8"),
    "utf-16 then utf-8": (_utf8_client, "utf-8"),
    "utf-32 only": (_utf32_client, "utf-32"),
}


def server_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "lsp")] + ([env["PYTHONPATH"]]
                                                                          if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def units(s: str, encoding: str = "utf-16") -> int:
    if encoding == "utf-8":
        return len(s.encode("utf-8"))
    if encoding == "utf-32":
        return len(s)
    return len(s.encode("utf-16-le")) // 2


def position(text: str, offset: int, encoding: str = "utf-16") -> types.Position:
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    return types.Position(line=line, character=units(text[start:offset], encoding))


def find(text: str, needle: str, nth: int = 0, encoding: str = "utf-16") -> types.Position:
    """The position of `$0` inside the nth occurrence of `needle` in `text`."""
    plain = needle.replace("$0", "")
    at = -1
    for _ in range(nth + 1):
        at = text.index(plain, at + 1)
    return position(text, at + needle.index("$0"), encoding)


def span_text(text: str, rng: types.Range, encoding: str = "utf-16") -> str:
    """The text an LSP range covers (decoding positions in `encoding`)."""
    lines = text.split("\n")

    def offset(p):
        line = lines[p.line]
        n = 0
        for i, ch in enumerate(line):
            if n >= p.character:
                return sum(len(l) + 1 for l in lines[:p.line]) + i
            n += units(ch, encoding)
        return sum(len(l) + 1 for l in lines[:p.line]) + len(line)

    return text[offset(rng.start):offset(rng.end)]


async def publish(client, uri: str, send, version=None, timeout: float = 20.0):
    """Run `send()` and return the diagnostics the server then publishes for `uri`."""
    while True:
        fut = client.protocol.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        if send is not None:
            send()
            send = None
        params = await asyncio.wait_for(asyncio.wrap_future(fut), timeout)
        if params.uri == uri and (version is None or params.version == version):
            return list(params.diagnostics)


async def open_doc(client, uri: str, text: str, version: int = 1):
    return await publish(client, uri, lambda: client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="qvr", version=version, text=text))), version)


async def change_doc(client, uri: str, version: int, changes):
    return await publish(client, uri, lambda: client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=changes)), version)


class RawClient:
    """A small blocking JSON-RPC client over the server's stdio (for the fuzz test, where
    hypothesis drives many edits synchronously).  Server->client requests are answered
    with null; every response and notification is kept."""

    def __init__(self, cmd=None, env=None):
        import json
        import subprocess
        import threading

        self._json = json
        self.proc = subprocess.Popen(cmd or SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env or server_env())
        self.cv = threading.Condition()
        self.responses: dict = {}
        self.notifications: list = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.stderr: list = []

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def _read(self):
        from jsonrpc_frames import read_frame
        out = self.proc.stdout
        while True:
            body = read_frame(out).message
            if body is None:  # the server closed its output (or sent no JSON)
                with self.cv:
                    self.cv.notify_all()
                return
            with self.cv:
                if "id" in body and "method" not in body:
                    self.responses[body["id"]] = body
                elif "id" in body:
                    self._send({"jsonrpc": "2.0", "id": body["id"], "result": None})
                else:
                    self.notifications.append(body)
                self.cv.notify_all()

    def _send(self, msg):
        data = self._json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.proc.stdin.flush()

    def request(self, method, params, timeout=30.0):
        with self.cv:
            self.next_id += 1
            rid = self.next_id
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with self.cv:
            if not self.cv.wait_for(lambda: rid in self.responses or self.proc.poll() is not None, timeout):
                raise TimeoutError(f"no answer to {method}")
            if rid not in self.responses:
                raise RuntimeError(f"server died during {method}: {''.join(self.stderr)[-2000:]}")
            return self.responses.pop(rid)

    def notify(self, method, params):
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def diagnostics(self, uri, version, timeout=30.0):
        def find():
            for i, n in enumerate(self.notifications):
                p = n.get("params") or {}
                if n.get("method") == "textDocument/publishDiagnostics" and p.get("uri") == uri \
                        and p.get("version") == version:
                    return i
            return None
        with self.cv:
            if not self.cv.wait_for(lambda: find() is not None or self.proc.poll() is not None, timeout):
                raise TimeoutError(f"no diagnostics for {uri} v{version}")
            i = find()
            if i is None:
                raise RuntimeError(f"server died: {''.join(self.stderr)[-2000:]}")
            n = self.notifications.pop(i)
            self.notifications[:] = [m for m in self.notifications if (m.get("params") or {}).get("uri") != uri]
            return n["params"]["diagnostics"]

    def close(self):
        try:
            self.request("shutdown", None, timeout=10)
            self.notify("exit", None)
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait(timeout=10)

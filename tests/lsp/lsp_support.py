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

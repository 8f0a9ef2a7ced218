"""Reading LSP messages off a server's stdout, for the tests' and the bench's minimal
JSON-RPC clients (`lsp_support.RawClient`, `bench/lsp.py`).  Standard library only.

`read_frame` reads one message the way pygls's own reader does, so a client built on it
sees exactly what an editor would.
"""
from __future__ import annotations

import json
import re

# pygls's reader (pygls.io_.run_async) recognises exactly this header line
CONTENT_LENGTH = re.compile(rb"^Content-Length: (\d+)\r\n$")


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


def frame(message: dict, headers: bytes = b"") -> bytes:
    """`message` framed as a client sends it (extra header lines after Content-Length)."""
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n%s\r\n" % (len(body), headers) + body

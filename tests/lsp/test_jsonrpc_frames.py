"""`read_frame`, the test clients' message reader, reads what pygls's reader reads."""
import io
import json

import pytest
from jsonrpc_frames import frame, read_frame

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"processId": None, "capabilities": {}}}
NEXT = {"jsonrpc": "2.0", "method": "initialized", "params": {}}


@pytest.mark.parametrize("headers", [b"", b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"])
def test_read_frame_reads_one_message_and_leaves_the_rest(headers):
    first = frame(INIT, headers)
    stream = io.BufferedReader(io.BytesIO(first + frame(NEXT)))
    got = read_frame(stream)
    assert got.raw == first and got.message == INIT
    assert stream.read() == frame(NEXT)


def test_read_frame_with_a_header_before_content_length():
    data = json.dumps(INIT).encode()
    first = b"Content-Type: application/vscode-jsonrpc\r\nContent-Length: %d\r\n\r\n" % len(data) + data
    got = read_frame(io.BytesIO(first + frame(NEXT)))
    assert got.raw == first and got.message == INIT


@pytest.mark.parametrize("data", [
    b"", b"Content-Length: 10\r\n", b"Content-Length: 10\r\n\r\n{\"a\"",  # the stream ends early
    b"Content-Length: 5\r\n\r\nnope!",  # not JSON
    b"content-length: 5\r\n\r\n{}   ",  # a header pygls's reader does not recognise either
])
def test_read_frame_without_a_message_keeps_every_byte(data):
    got = read_frame(io.BytesIO(data))
    assert got.message is None and got.raw == data

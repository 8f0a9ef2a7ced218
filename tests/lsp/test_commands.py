"""The command lines (`qvr-lsp`, `qvr lsp`), TCP mode, and the layering rule that the
language server never imports torch, the runtime or the dashboard."""
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsp_support import ROOT, server_env


# ---------------------------------------------------------------- command lines and TCP

def _frame(msg) -> bytes:
    data = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def _read(sock_file):
    length = None
    while True:
        line = sock_file.readline()
        if not line:
            raise EOFError
        if line in (b"\r\n", b"\n"):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(sock_file.read(length))


def test_tcp_mode_serves_a_client():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "qvr.cli", "lsp", "--tcp", "--port", str(port)],
                            env=server_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # a safety limit: a busy machine starts slowly
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        with conn:
            f = conn.makefile("rb")
            conn.sendall(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
            resp = _read(f)
            assert resp["id"] == 1 and resp["result"]["serverInfo"]["name"] == "qvr-lsp"
            conn.sendall(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
            conn.sendall(_frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": "file:///tmp/t.qvr", "languageId": "qvr", "version": 1, "text": "object A : Siez\n"}}}))
            while True:
                msg = _read(f)
                if msg.get("method") == "textDocument/publishDiagnostics":
                    break
            assert [d["code"] for d in msg["params"]["diagnostics"]] == ["QVR101"]
            conn.sendall(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None}))
            while _read(f).get("id") != 2:
                pass
            conn.sendall(_frame({"jsonrpc": "2.0", "method": "exit", "params": None}))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("cmd", [[sys.executable, "-m", "qvr_lsp", "--help"],
                                 [sys.executable, "-m", "qvr.cli", "lsp", "--help"]])
def test_command_lines(cmd):
    out = subprocess.run(cmd, env=server_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--tcp" in out.stdout and "--port" in out.stdout


def test_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'qvr-lsp = "qvr_lsp.__main__:main"' in text


def test_the_server_never_imports_torch_textual_or_the_runtime():
    code = (
        "import sys\n"
        "import qvr_lsp.server, qvr_lsp.handlers, qvr_lsp.convert, qvr_lsp.__main__\n"
        "qvr_lsp.server.build_server()\n"
        "from qvr.analysis import Document\n"
        "from qvr.ide import hover, goto, rename, symbols, completion, signature, inlay, semantic_tokens,"
        " folding, selection, code_actions\n"
        "import qvr.commands.lsp\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'textual') or m.startswith('qvr.runtime')"
        " or m.startswith('qvr_tui')]\n"
        "print('BAD=' + ','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], env=server_env(), cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "BAD="


def test_installed_console_script():
    script = Path(sys.executable).parent / "qvr-lsp"
    if not script.exists():
        pytest.skip("qvr-lsp is not installed in this environment (pip install -e .)")
    out = subprocess.run([str(script), "--help"], env=server_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("usage: qvr-lsp")

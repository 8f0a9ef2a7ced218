"""Benchmark of the language server over stdio, with a minimal JSON-RPC client.

Generates a 5,000-line QVR program, starts `python -m qvr_lsp`, and measures:

* start: from spawning the process to the `initialize` response, over `--starts` fresh
  processes (best and median; pygls's own start-up answers it); also, per process, when
  the server is ready (the answer to a `shutdown` sent right after `initialized`);
* open: from `didOpen` of the 5,000-line file, sent right after `initialized`, to its
  first `publishDiagnostics` (this includes whatever of pygls and the front end is still
  loading; `start_to_first_diagnostics_s` is the same from process start);
* diagnostics latency: from a one-character `didChange` to the matching
  `publishDiagnostics` (p50/p95 over many edits: a program-local name, a `stack` count and
  a doc comment, each edit followed by its undo so the file stays valid);
* hover and completion latency (p50/p95) at positions spread over the file;
* resident memory of the server process (VmRSS / VmHWM from /proc) after the run;
* for context, how long a bare interpreter takes to import lsprotocol and pygls alone.

Goals (issue 6): start < 0.5 s, diagnostics p95 < 20 ms, hover p95 < 10 ms.

    PYTHONPATH=.:lsp .venv/bin/python bench/lsp.py [--lines 5000] [--edits 200] [--starts 7] [--starts-only] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "lsp"))  # the tests' JSON-RPC framing helper


class Client:
    """A blocking JSON-RPC client for an LSP server subprocess (stdio framing)."""

    def __init__(self, cmd, env=None):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0
        self.cv = threading.Condition()
        self.responses: dict = {}
        self.notifications: list = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        from jsonrpc_frames import read_frame  # tests/lsp/jsonrpc_frames.py
        out = self.proc.stdout
        while True:
            body = read_frame(out).message
            if body is None:  # the server closed its output (or sent no JSON)
                return
            now = time.perf_counter()
            with self.cv:
                if "id" in body and "method" not in body:
                    self.responses[body["id"]] = (now, body)
                elif "method" in body and "id" in body:  # a server->client request: answer null
                    self._send({"jsonrpc": "2.0", "id": body["id"], "result": None})
                else:
                    self.notifications.append((now, body))
                self.cv.notify_all()

    def _send(self, msg):
        data = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.proc.stdin.flush()

    def request(self, method, params, timeout=60.0):
        with self.cv:
            self.next_id += 1
            rid = self.next_id
        t0 = time.perf_counter()
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with self.cv:
            if not self.cv.wait_for(lambda: rid in self.responses, timeout):
                raise TimeoutError(method)
            t1, body = self.responses.pop(rid)
        return t1 - t0, body

    def notify(self, method, params):
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_notification(self, pred, timeout=60.0):
        with self.cv:
            def find():
                for i, (t, n) in enumerate(self.notifications):
                    if pred(n):
                        return i
                return None
            if not self.cv.wait_for(lambda: find() is not None, timeout):
                raise TimeoutError("notification")
            t, n = self.notifications.pop(find())
        return t, n

    def close(self):
        try:
            self.request("shutdown", None, timeout=10)
            self.notify("exit", None)
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()


def generate(lines: int) -> str:
    """A valid program of about `lines` lines: objects, kernel chains, lets and programs."""
    out = ["## Generated benchmark module.", "object Tok : FinSet 64", "object Hid : Real 32", ""]
    i = 0
    while len(out) < lines - 8:
        out += [f"## Layer {i}.",
                f"morphism up_{i} : Hid -> Hid [role=kernel, scale=0.1] ~ Normal",
                f"morphism down_{i} : Hid -> Hid [role=kernel] ~ Laplace",
                f"let block_{i} = up_{i} >> down_{i} >> stack(up_{i}, 2)",
                f"program prog_{i} : Hid -> Hid",
                f"    sample z_{i} <- block_{i}",
                f"    sample s_{i} <- HalfNormal(1.0)",
                f"    let m_{i} = exp(s_{i}) * 2.0",
                f"    observe y_{i} : Tok <- Normal(m_{i}, s_{i})",
                f"    return z_{i}",
                ""]
        i += 1
    out += ["morphism embed : Tok -> Hid [role=embed]", f"let model = embed >> block_{i - 1}", "export model", ""]
    return "\n".join(out)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def rss_kib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def import_floor() -> dict:
    """Seconds for a bare interpreter to import pygls's server and lsprotocol's types (the
    libraries' own share of the start time), median of three."""
    out = {}
    for label, code in (("python", "pass"), ("lsprotocol.types", "import lsprotocol.types"),
                        ("pygls.lsp.server", "import pygls.lsp.server")):
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            ts.append(time.perf_counter() - t0)
        out[label] = round(statistics.median(ts), 3)
    return out


def server_env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'lsp'}")
    env.update(extra)
    return env


CAPS = {"textDocument": {"completion": {"completionItem": {"snippetSupport": True}}}}


def one_start(env) -> tuple[float, float]:
    """(process start -> initialize response, process start -> pygls ready) for a fresh
    server: `ready` is the answer to a `shutdown` sent right after `initialized`."""
    t0 = time.perf_counter()
    c = Client([sys.executable, "-m", "qvr_lsp"], env=env)
    _, resp = c.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": CAPS})
    start = time.perf_counter() - t0
    assert "capabilities" in resp["result"], resp
    c.notify("initialized", {})
    c.request("shutdown", None)
    ready = time.perf_counter() - t0
    c.notify("exit", None)
    c.proc.wait(timeout=10)
    return start, ready


def starts(n: int) -> dict:
    """Best and median of `n` fresh starts: to the `initialize` answer and to ready."""
    runs = [one_start(server_env()) for _ in range(n)]
    return {"start_s": {"best": round(min(r[0] for r in runs), 3),
                        "median": round(statistics.median(r[0] for r in runs), 3), "n": n},
            "ready_s": {"best": round(min(r[1] for r in runs), 3),
                        "median": round(statistics.median(r[1] for r in runs), 3)}}


def run(n_lines: int, n_edits: int, n_queries: int, n_starts: int = 7) -> dict:
    text = generate(n_lines)
    lines = text.split("\n")
    env = server_env()
    t0 = time.perf_counter()
    c = Client([sys.executable, "-m", "qvr_lsp"], env=env)
    t_init, resp = c.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": CAPS})
    start = time.perf_counter() - t0
    c.notify("initialized", {})
    uri = "file:///tmp/bench_5000.qvr"
    t_open = time.perf_counter()
    c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "qvr", "version": 1, "text": text}})
    t, first = c.wait_notification(lambda n: n.get("method") == "textDocument/publishDiagnostics")
    open_s = t - t_open
    first_diag_s = t - t0
    assert first["params"]["diagnostics"] == [], first["params"]["diagnostics"][:3]

    # one-character edits, each followed by its undo so the file stays valid, cycling over
    # three places: a program-local name, the count of a top-level `stack(…, 2)`, and a
    # doc comment; spread over the whole file
    let_lines = [k for k, l in enumerate(lines) if l.startswith("    let m_")]
    block_lines = [k for k, l in enumerate(lines) if l.startswith("let block_")]
    doc_lines = [k for k, l in enumerate(lines) if l.startswith("## Layer ")]
    diag_ms = []
    version = 1

    def rng(k, a, b):
        return {"start": {"line": k, "character": a}, "end": {"line": k, "character": b}}

    for e in range(n_edits):
        pair, undo = divmod(e, 2)
        kind = pair % 3
        pick = (pair * 37) % len(let_lines)
        if kind == 0:
            k, col = let_lines[pick], len("    let m_")
            change = {"range": rng(k, col, col + undo), "text": "" if undo else "x"}
        elif kind == 1:
            k = block_lines[pick % len(block_lines)]
            col = lines[k].rindex(", 2)") + 2
            change = {"range": rng(k, col, col + 1), "text": "2" if undo else "3"}
        else:
            k, col = doc_lines[pick % len(doc_lines)], len("## Layer")
            change = {"range": rng(k, col, col + undo), "text": "" if undo else "!"}
        version += 1
        t1 = time.perf_counter()
        c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                            "contentChanges": [change]})
        t2, note = c.wait_notification(lambda n, v=version: n.get("method") == "textDocument/publishDiagnostics"
                                       and n["params"].get("version") == v)
        if undo:  # back to the original text: clean again
            assert note["params"]["diagnostics"] == [], note["params"]["diagnostics"][:2]
        diag_ms.append((t2 - t1) * 1000)

    # hover on morphism names in `let block_i = up_i >> …` lines, completion after `>>`
    block_lines = [k for k, l in enumerate(lines) if l.startswith("let block_")]
    hover_ms, comp_ms = [], []
    for q in range(n_queries):
        k = block_lines[(q * 53) % len(block_lines)]
        col = lines[k].index("up_")
        dt, body = c.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                    "position": {"line": k, "character": col + 1}})
        assert body.get("result"), body
        hover_ms.append(dt * 1000)
        col2 = lines[k].index(">> ") + 3
        dt, body = c.request("textDocument/completion", {"textDocument": {"uri": uri},
                                                         "position": {"line": k, "character": col2}})
        assert body.get("result") and body["result"]["items"], body
        comp_ms.append(dt * 1000)
    rss, hwm = rss_kib(c.proc.pid)
    c.close()
    return {
        "lines": len(lines),
        **starts(n_starts),
        "start_to_initialized_s": round(start, 3),
        "start_to_first_diagnostics_s": round(first_diag_s, 3),
        "open_to_first_diagnostics_s": round(open_s, 3),
        "diagnostics_ms": {"p50": round(statistics.median(diag_ms), 2), "p95": round(pct(diag_ms, 95), 2),
                           "n": len(diag_ms)},
        "hover_ms": {"p50": round(statistics.median(hover_ms), 2), "p95": round(pct(hover_ms, 95), 2),
                     "n": len(hover_ms)},
        "completion_ms": {"p50": round(statistics.median(comp_ms), 2), "p95": round(pct(comp_ms, 95), 2),
                          "n": len(comp_ms)},
        "rss_mib": round(rss / 1024, 1),
        "peak_rss_mib": round(hwm / 1024, 1),
        "import_floor_s": import_floor(),
        "goals": {"start_s": 0.5, "diagnostics_p95_ms": 20, "hover_p95_ms": 10},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=5000)
    p.add_argument("--edits", type=int, default=200)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--starts", type=int, default=7, help="fresh starts to time (each way)")
    p.add_argument("--starts-only", action="store_true", help="only time fresh starts")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.starts_only:
        res = {**starts(args.starts), "goals": {"start_s": 0.5}}
    else:
        res = run(args.lines, args.edits, args.queries, args.starts)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k:32} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

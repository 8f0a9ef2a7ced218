"""One real client: headless Neovim (0.7 API) opens an example with a planted error,
receives the server's diagnostics, and gets a hover with a morphism's type."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_support import EXAMPLES, server_env

HERE = Path(__file__).parent / "nvim"
NVIM = shutil.which("nvim")


@pytest.mark.skipif(NVIM is None, reason="nvim is not on PATH (apt-get install -y neovim)")
def test_neovim_headless_diagnostics_and_hover(tmp_path):
    text = (EXAMPLES / "transformer_lm.qvr").read_text(encoding="utf-8")
    planted = text.replace("[role=kernel] ~ Categorical", "[role=kernel] ~ Categoricl")
    assert planted != text
    src = tmp_path / "seed.qvr"
    src.write_text(planted, encoding="utf-8")
    lines = planted.split("\n")
    line = next(i for i, l in enumerate(lines) if l.startswith("    sample h <- backbone"))
    result = tmp_path / "result.json"
    env = server_env(QVR_PYTHON=sys.executable, QVR_RESULT=str(result), QVR_HOVER_LINE=str(line),
                     QVR_HOVER_CHAR=str(lines[line].index("backbone") + 2), HOME=str(tmp_path))
    proc = subprocess.run([NVIM, "--headless", "--noplugin", "-u", str(HERE / "init.lua"), str(src),
                           "-c", f"luafile {HERE / 'run_test.lua'}"],
                          cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    assert result.exists(), (proc.returncode, proc.stdout, proc.stderr)
    report = json.loads(result.read_text())
    assert proc.returncode == 0 and report["ok"], (report, proc.stderr)
    assert report["filetype"] == "qvr"
    cat_line = next(i for i, l in enumerate(lines) if "Categoricl" in l)
    assert [(d["lnum"], d["col"], d["end_col"], d["code"], d["severity"], d["message"]) for d in report["diagnostics"]] == [
        (cat_line, lines[cat_line].index("Categoricl"), lines[cat_line].index("Categoricl") + len("Categoricl"),
         "QVR108", 1, "unknown distribution family `Categoricl`; did you mean `Categorical`?")]
    assert report["hover_kind"] == "markdown"
    assert report["hover"] == "```qvr\nbackbone : Token -> Latent\n```\nlet"

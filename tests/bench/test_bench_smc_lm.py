"""`bench/smc.py --lm` (issue 40, point 6): the qvr side runs and reports its figures, and
the llamppl side's constraint (`bench/side/llamppl_smc.py`'s `violates`) judges every
string as qvr's `forbid_words` does, so both sides steer to the same target.  The
comparison itself needs llamppl's side virtualenv and is run by hand."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_lm"

pytest.importorskip("transformers")


def test_qvr_side_figures(tmp_path):
    out = tmp_path / "lm.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "smc.py"), "--lm", str(TINY),
                        "--no-side", "--seeds", "3", "--particles", "8", "--max-len", "6",
                        "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"qvr K=1 (default)", "qvr K=3"}
    for r in rows.values():
        assert len(r["log_Z"]) == 3 and all(x <= 0 for x in r["log_Z"])
        # 2 layers x (keys + values) x width 64 x 4 bytes (float32) per position
        assert r["kv_per_token"] == 2 * 2 * 64 * 4
        assert r["tokens_per_s"] > 0
    assert "qvr K=1 (default)" in p.stdout


def _side_module():
    spec = importlib.util.spec_from_file_location(
        "llamppl_smc", ROOT / "bench" / "side" / "llamppl_smc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_side_constraint_is_qvrs():
    import numpy as np
    from qvr.smc.hf_lm import load_lm
    from qvr.smc.text_potentials import forbid_words
    side = _side_module()
    lm = load_lm(str(TINY))
    rng = np.random.default_rng(0)
    for words, max_len in ((["the"], 6), (["dog"], 4), (["the", "a"], 8)):
        qvr_pot = forbid_words(*words, decode=lm.decode, eos=lm.eos, max_len=max_len)
        phrases = [(w,) for w in words]
        refused = 0
        for _ in range(400):
            n = int(rng.integers(1, max_len + 1))
            # common word pieces, so that forbidden words come up often
            child = [int(t) for t in rng.choice([0, 2, 27, 28, 29, 30, 33, 37, 38, 39, 3],
                                                size=n)]
            ends = child[-1] == lm.eos
            final = ends or n >= max_len
            text = lm.tokenizer.decode(child[:-1] if ends else child,
                                       skip_special_tokens=False)
            theirs = side.violates(text, final, phrases)
            assert theirs == qvr_pot._judge(child), (child, text, final)
            refused += theirs
        assert 20 < refused < 380  # both outcomes are exercised

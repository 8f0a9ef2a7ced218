"""The decoder-only transformer example end to end (issue 17, example 1): SVI on part of
its shipped corpus brings the loss well below the corpus's unigram entropy, and SMC over
the fitted model generates sentences that keep its constraints, shown as text."""
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr.datafiles import find_data, find_vocab, load_data, load_vocab

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "decoder_lm.qvr"
ROWS = 32


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    import qvr
    from qvr.inference import FitConfig, fit
    data = load_data(find_data(PROGRAM))
    data = {k: v[:ROWS] for k, v in data.items()}
    torch.manual_seed(0)
    program = qvr.load(str(PROGRAM))
    run = tmp_path_factory.mktemp("runs") / "svi"
    res = fit(program, data, FitConfig(method="svi", steps=60, draws=4, lr=0.03),
              run_dir=str(run), program_path=str(PROGRAM))
    return res, data, run


def test_svi_falls_well_below_the_unigram_entropy(fitted):
    res, data, _ = fitted
    y = data["next_token"]
    counts = np.array(list(Counter(y.ravel().tolist()).values()), dtype=float)
    p = counts / counts.sum()
    unigram = float(-(p * np.log(p)).sum())           # nats per token, about 3.0
    per_token = np.asarray(res.losses) / y.size
    assert res.status == "finished"
    assert per_token[0] > math.log(32) - 0.2           # starts near the uniform model
    assert per_token[-10:].mean() < unigram - 0.8, (per_token[-10:].mean(), unigram)


def test_smc_from_the_fitted_run_keeps_its_constraints(fitted, tmp_path):
    import qvr
    from qvr.inference import FitConfig, fit
    _, _, run = fitted
    vocab = load_vocab(find_vocab(PROGRAM))
    res = fit(qvr.load(str(PROGRAM)), config=FitConfig(
        method="smc", particles=32, max_len=14, forbid=[["dog"]], require=[["cat", 4]], seed=1),
        start_from=str(run), run_dir=str(tmp_path / "smc"), program_path=str(PROGRAM),
        vocab=vocab)
    assert res.status == "finished", res.message
    top = res.sequences["top"]
    assert top and math.isfinite(res.sequences["log_Z"])
    for s in top:
        words = s["text"].split()
        assert "dog" not in words and "cat" in words[:4], s["text"]

"""A QVR program whose next-token model is a pretrained causal LM (docs/extensions.md E10,
issue 40): the runtime morphism's law is `HFCausalLM`'s, `qvr run --method smc` on such a
program is the `--lm` run (KV cache, text, word constraints), `--lm` beside it wins with a
note, and every other method is refused in one line.  Skipped without transformers."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

pytest.importorskip("transformers")

import qvr  # noqa: E402
from qvr.runtime.morphisms.pretrained import PretrainedLM, PretrainedUnavailable  # noqa: E402
from qvr.smc.hf_lm import load_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STEER = ROOT / "examples" / "steer.qvr"
TINY = ROOT / "examples" / "tiny_lm"


@pytest.fixture(scope="module")
def steer():
    return qvr.load(STEER)


@pytest.fixture(scope="module")
def lm(steer):
    m = next(m for m in steer.exports["steer"].modules() if isinstance(m, PretrainedLM))
    assert isinstance(m, PretrainedLM) and m.mixes_positions
    return m


def test_the_compiled_morphism_holds_no_parameters_of_the_model(steer, lm):
    assert list(steer.exports["steer"].parameters()) == []
    assert (lm.folder, lm.dtype_name, lm.vocab) == (str(TINY.resolve()), "float32", 64)


def test_its_law_at_every_position_is_the_hf_models(lm):
    hf = load_lm(str(TINY))
    x = torch.tensor([[hf.bos, 5, 7, 9], [hf.bos, 3, 3, 2]])
    got = lm.logits(x)  # (2, 4, 64): position i reads tokens 0..i
    assert got.shape == (2, 4, 64)
    for i in range(1, 4):  # HFCausalLM prepends its start token to each prefix
        want = hf.logits([tuple(r[1:i + 1].tolist()) for r in x])
        assert torch.allclose(got[:, i], want, atol=1e-5), i
    lp = lm.log_prob(x, x.roll(-1, 1))
    full = torch.log_softmax(got.double(), -1)
    assert torch.allclose(lp.double(), full.gather(-1, x.roll(-1, 1).unsqueeze(-1)).squeeze(-1),
                          atol=1e-6)


def test_draws_follow_the_law(lm):
    torch.manual_seed(0)
    x = torch.tensor([[0, 5, 7]])
    draws = lm.rsample(x, (4000,))  # (4000, 1, 3)
    assert draws.shape == (4000, 1, 3) and lm.rsample(x).shape == (1, 3)
    assert lm.rsample(torch.tensor([0, 5])).shape == (2,)  # one batch axis: length-1 rows
    p = torch.softmax(lm.logits(x)[0, -1].double(), -1)
    freq = torch.bincount(draws[:, 0, -1], minlength=64).double() / 4000
    se = (p * (1 - p) / 4000).sqrt()
    assert bool(((freq - p).abs() <= 4.5 * se + 1e-3).all())


def test_without_transformers_the_first_use_says_what_to_install(lm, monkeypatch):
    fresh = PretrainedLM(lm.domain, lm.codomain, lm.folder, label="lm")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(PretrainedUnavailable, match=r"`lm` is a pretrained language model: it "
                                                    r"needs Hugging Face transformers: pip "
                                                    r"install -e \"\.\[lm\]\""):
        fresh.rsample(torch.tensor([[0, 1]]))


def run_cli(capsys, *args):
    from qvr.cli import main
    rc = main(["run", str(STEER), *args])
    out, err = capsys.readouterr()
    return rc, out, err


def sequences(folder):
    run = next(Path(folder).iterdir())
    return json.loads((run / "sequences.json").read_text()), json.loads(
        (run / "run.json").read_text())


def test_smc_on_the_program_is_the_lm_run(tmp_path, capsys):
    common = ["--method", "smc", "--prompt", "the old dog", "--forbid", "cat",
              "--particles", "8", "--max-len", "10", "--seed", "3"]
    rc, out, err = run_cli(capsys, *common, "--runs-dir", str(tmp_path / "a"))
    assert rc == 0, err
    assert "warning" not in err
    seqs, meta = sequences(tmp_path / "a")
    assert seqs["lm"] == str(TINY.resolve()) and seqs["mode"] == "kv-cache"
    assert seqs["cache"] == "shared-prefix"  # the prompt's keys once, suffixes in place
    assert seqs["prompt"] == "the old dog" and meta["config"]["lm"] == str(TINY.resolve())
    texts = [p["text"] for p in seqs["particles"]]
    live = [p["text"] for p in seqs["particles"] if p["log_weight"] > float("-inf")]
    assert live and all("cat" not in t.split() for t in live)
    assert all(isinstance(t, str) for t in texts) and seqs["top"][0]["text"] in texts
    # the same run with --lm naming the same folder: the same particles, no note
    rc, out, err = run_cli(capsys, *common, "--lm", str(TINY), "--runs-dir", str(tmp_path / "b"))
    assert rc == 0, err
    assert "warning" not in err
    assert [p["text"] for p in sequences(tmp_path / "b")[0]["particles"]] == texts


def test_another_lm_wins_with_a_note(tmp_path, capsys):
    import shutil
    other = tmp_path / "other_lm"  # another folder (a copy: a link would resolve to it)
    shutil.copytree(TINY, other)
    rc, out, err = run_cli(capsys, "--method", "smc", "--lm", str(other), "--particles", "2",
                           "--max-len", "3", "--runs-dir", str(tmp_path / "runs"))
    assert rc == 0, err
    assert (f"qvr run: warning: --lm {other} is steered in place of the program's pretrained "
            f"`lm` (model \"tiny_lm\")\n") in err
    assert sequences(tmp_path / "runs")[0]["lm"] == str(other)


@pytest.mark.parametrize("method", ["svi", "nuts", "prior", "pathfinder"])
def test_other_methods_are_refused_in_one_line(method, tmp_path, capsys):
    rc, out, err = run_cli(capsys, "--method", method, "--runs-dir", str(tmp_path))
    assert rc == 1
    assert err == (f"qvr run: {STEER}: `lm` is a pretrained LM: it is steered with --method smc; "
                   f"there is nothing to fit with --method {method}\n")
    assert not any(tmp_path.iterdir())  # no run folder made for nothing


def test_fit_takes_the_model_from_the_program(steer):
    from qvr.inference import fit
    from qvr.inference.data.fit_data import DataError
    res = fit(steer, config={"method": "smc", "prompt": "the", "particles": 4, "max_len": 5,
                             "seed": 1})
    assert res.status == "finished"
    assert res.sequences["lm"] == str(TINY.resolve())
    assert all(isinstance(p["text"], str) for p in res.sequences["particles"])
    with pytest.raises(DataError, match=r"^`lm` is a pretrained LM: it is steered with --method "
                                        r"smc; there is nothing to fit with --method svi$"):
        fit(steer, config={"method": "svi", "steps": 2})


def test_smc_on_an_export_that_does_not_steer_the_model_is_refused(tmp_path, capsys):
    from qvr.cli import main
    path = tmp_path / "other.qvr"
    path.write_text(f"object Token : FinSet 64\n"
                    f"morphism lm : Token -> Token [role=pretrained, model=\"{TINY}\"]\n"
                    f"morphism k : Token -> Token [role=kernel]\n"
                    f"program p : Token -> Token\n    sample h <- lm\n    sample y <- k(h)\n"
                    f"    return y\nexport p\n")
    rc = main(["run", str(path), "--method", "smc", "--eos", "0", "--runs-dir",
               str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 1 and err == (
        f"qvr run: {path}: `lm` is a pretrained LM: SMC steers it when the export is `lm` or a "
        f"program `sample NAME <- lm` then `return NAME`; this export uses it otherwise\n")
    assert not (tmp_path / "runs").exists()


def test_check_names_an_absent_model(tmp_path, capsys, monkeypatch):
    from qvr.cli import main
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    path = tmp_path / "absent.qvr"
    path.write_text("object Token : FinSet 64\n"
                    "morphism lm : Token -> Token [role=pretrained, model=\"gone\"]\nexport lm\n")
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert (f"{path}:2:54: error[QVR860]: pretrained model `gone` not found: tried the folder "
            f"{tmp_path / 'gone'}, the folder gone, models--gone in the Hugging Face cache "
            f"({tmp_path / 'hub'}) (nothing is downloaded)") in out

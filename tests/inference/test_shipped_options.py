"""Fit options shipped beside a program (`data/NAME.fit.json`) are its defaults: `qvr run`
uses those of its method (explicit options override them) and says so; a bad file is a
usage error naming it."""
import argparse
import json
import shutil
from pathlib import Path

import pytest

from qvr.commands.run import UsageError, add_fit_options, config_from_args
from qvr.inference.config import shipped_options

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _args(argv, file):
    p = argparse.ArgumentParser()
    p.add_argument("--method", default="svi")
    p.add_argument("--config", dest="config_file")
    add_fit_options(p)
    ns = p.parse_args(argv)
    ns.file = str(file)
    return ns


def test_the_decoder_example_ships_its_options():
    path, opts = shipped_options(EXAMPLES / "decoder_lm.qvr")
    assert path == EXAMPLES / "data" / "decoder_lm.fit.json"
    assert opts == {"steps": 150, "draws": 8}
    assert shipped_options(EXAMPLES / "decoder_lm.qvr", "nuts")[1] == {"draws": 8}
    assert shipped_options(EXAMPLES / "decoder_lm.qvr", "smc")[1] == {}
    assert shipped_options(EXAMPLES / "hmm.qvr") == (None, {})


def test_qvr_run_uses_them_and_explicit_options_win(tmp_path):
    prog = EXAMPLES / "decoder_lm.qvr"
    cfg = config_from_args(_args(["--method", "svi"], prog))
    assert (cfg.steps, cfg.draws) == (150, 8)
    cfg = config_from_args(_args(["--method", "svi", "--steps", "20"], prog))
    assert (cfg.steps, cfg.draws) == (20, 8)
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps({"draws": 4}))
    cfg = config_from_args(_args(["--method", "svi", "--config", str(conf)], prog))
    assert (cfg.steps, cfg.draws) == (150, 4)
    assert config_from_args(_args(["--method", "smc"], prog)).method == "smc"


def test_a_bad_shipped_file_is_named(tmp_path):
    prog = tmp_path / "m.qvr"
    shutil.copy(EXAMPLES / "decoder_lm.qvr", prog)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "m.fit.json").write_text('{"stepz": 3}')
    with pytest.raises(UsageError) as info:
        config_from_args(_args(["--method", "svi"], prog))
    assert str(info.value) == f"{tmp_path / 'data' / 'm.fit.json'}: unknown option stepz"
    (tmp_path / "data" / "m.fit.json").write_text('[1]')
    with pytest.raises(UsageError, match="fit options must be a JSON object"):
        config_from_args(_args(["--method", "svi"], prog))

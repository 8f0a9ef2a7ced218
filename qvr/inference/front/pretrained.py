"""`fit` on an export that steers a pretrained causal LM (docs/extensions.md E10):

* ``method="smc"`` without ``lm``: the config gets the program's model as ``lm`` (its
  folder, and its ``dtype`` unless the config asks for bfloat16), so the run is the
  ``--lm`` run of `qvr.inference.methods.smc_lm` — KV cache, text prompts, word
  constraints, text in the record;
* ``lm`` given as well, naming another model: ``lm`` wins, with a note
  (`lm_replaces`);
* any other method: refused in one line (`refuse_fitting`), since the model's weights
  are not the program's to fit.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from qvr.inference.data.fit_data import DataError
from qvr.inference.methods.smc_scores import steered_of


def with_pretrained_lm(program, config, export: Optional[str] = None):
    """`config` with ``lm``/``lm_dtype`` from the program's pretrained model (SMC without
    ``lm`` only; unchanged otherwise)."""
    if config.method != "smc" or config.lm is not None:
        return config
    found = steered_of(program, export)
    if found is None:
        return config
    dtype = config.lm_dtype if config.lm_dtype != "float32" else found.dtype
    return replace(config, lm=found.folder, lm_dtype=dtype)


def lm_replaces(program, config) -> Optional[str]:
    """The note of an ``lm`` that is not the program's own pretrained model, or None."""
    found = steered_of(program)
    if found is None or config.lm is None:
        return None
    given = Path(config.lm).expanduser()
    if given.is_dir() and given.resolve() == Path(found.folder):
        return None
    return (f"--lm {config.lm} is steered in place of the program's pretrained `{found.morphism}` "
            f"(model \"{found.spelled}\")")


def refuse_fitting(model, config) -> None:
    """A `DataError` when `model` holds a pretrained LM and `config` cannot run it: a
    method other than SMC (nothing to fit), or SMC without ``lm`` — the export does not
    steer the model (`with_pretrained_lm` would have set ``lm``), and SMC's program
    model cannot extend a pretrained LM one position at a time."""
    from qvr.runtime.morphisms.pretrained import PretrainedLM
    modules = model.modules() if hasattr(model, "modules") else ()
    found = next((m for m in modules if isinstance(m, PretrainedLM)), None)
    if found is None:
        return
    name = found.label
    if config.method != "smc":
        raise DataError(f"`{name}` is a pretrained LM: it is steered with --method smc; "
                        f"there is nothing to fit with --method {config.method}")
    if config.lm is None:
        raise DataError(f"`{name}` is a pretrained LM: SMC steers it when the export is "
                        f"`{name}` or a program `sample NAME <- {name}` then `return NAME`; "
                        f"this export uses it otherwise")

"""Which pretrained model an export steers (docs/extensions.md E10), read from the
checked module without torch: `qvr run --method smc` and `fit` use it in place of
``--lm``, and refuse the other methods on such an export.

An export *steers* the pretrained morphism `lm` when it is `lm` itself, or a program
whose steps are one ``sample NAME <- lm``, any number of ``score`` steps (a steering
program's potentials, `qvr.sema.steering_scores`) and ``return NAME``.  The score steps
come back as plain data (`SteerScore`: name, line, expression, text calls) for SMC."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from qvr.sema.steering_scores import SteerScore, program_scores
from qvr.sema.symbols import MorphismSym, ProgramSym
from qvr.syntax import ast as A


@dataclass(frozen=True)
class Steered:
    morphism: str  # the pretrained morphism's name
    spelled: str  # its `model` option as written
    folder: str  # the resolved folder
    dtype: str  # its `dtype` option
    scores: tuple[SteerScore, ...] = ()  # the program's score steps (E10), in order


def _export_name(tm, export: Optional[str]) -> Optional[str]:
    names = [n for n, _e, _td in tm.exports() if n is not None]
    if export is not None:
        return export if export in names else None
    return names[0] if names else None


def _pretrained(sym) -> Optional[Steered]:
    if isinstance(sym, MorphismSym) and sym.role == "pretrained" and sym.pretrained:
        spelled, folder, _t, _l, _v, dtype, _c = sym.pretrained
        return Steered(sym.name, spelled, folder, dtype)
    return None


def steered_model(tm, export: Optional[str] = None) -> Optional[Steered]:
    """The pretrained model the export (`export`, else the first) steers, or None."""
    name = _export_name(tm, export)
    if name is None:
        return None
    sym = tm.symbol("value", name)
    found = _pretrained(sym)
    if found is not None or not isinstance(sym, ProgramSym):
        return found
    decl = next((td.decl for td in tm.decls if isinstance(td.decl, A.ProgramDecl)
                 and td.decl.name.text == name), None)
    if decl is None or decl.params is not None or len(decl.body) < 2:
        return None
    step, *scores, ret = decl.body
    if not (isinstance(step, A.SampleStep) and isinstance(ret, A.ReturnStep)
            and isinstance(step.bind, A.Name) and step.target.args is None
            and step.index is None and step.options is None and isinstance(ret.value, A.Name)
            and ret.value.text == step.bind.text
            and all(isinstance(s, A.ScoreStep) and s.index is None for s in scores)):
        return None
    found = _pretrained(tm.symbol("value", step.target.name.text))
    if found is None or not scores:
        return found
    td = next(td for td in tm.decls if td.decl is decl)

    def line_of(offset: int) -> int:
        return tm.text.count("\n", 0, td.start + offset) + 1
    return replace(found, scores=program_scores(decl, line_of))


def steered_in_file(path: str, export: Optional[str] = None) -> Optional[Steered]:
    """`steered_model` of a ``.qvr`` file (None when it cannot be read or has errors)."""
    from qvr.sema.typed import typed_module
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    tm = typed_module(text, str(path))
    if tm.errors:
        return None
    return steered_model(tm, export)

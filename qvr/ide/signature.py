"""Signature help: the parameters of the call the cursor is in, and which one is active.

Works on the text before the cursor (the call is usually unfinished): the innermost open
`(` of the current statement, the name before it, and the commas since.  Knows families
(step targets and latent priors), builtins (let-expressions), morphism combinators
(`fan`, `stack`, `repeat`, `scan`, `identity`, `from_data`, and the extension's
`residual`, `layer_norm`, `rms_norm`), morphism step targets (one
parameter per domain factor) and parametric programs.  Let-expression builtins (in `let`,
`score` and `record` steps) are shown as `qvr.sema.families.BUILTINS` spells them,
optional parameters and the lambda of `fold`/`scan`/`ode` included; a family called inside
a let-expression (`log_density(Normal(…), x)`) shows its parameters.  No LSP types here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from qvr.ide.catalog import COMBINATORS, builtin_params, lambda_params, split_params
from qvr.ide.textscan import bracket_stack, word_before
from qvr.sema.check_morph import MORPHISM_BUILTINS
from qvr.sema.families import BUILTINS, FAMILIES
from qvr.sema.symbols import LetSym, MorphismSym, ProgramSym
from qvr.sema.types import factors, spell, spell_mor



@dataclass(frozen=True)
class Signature:
    label: str
    params: tuple[tuple[int, int], ...]  # parameter ranges inside `label`
    active: int
    doc: str = ""


def _label(name: str, params: list[str]) -> tuple[str, tuple]:
    label = name + "("
    ranges = []
    for i, p in enumerate(params):
        if i:
            label += ", "
        ranges.append((len(label), len(label) + len(p)))
        label += p
    return label + ")", tuple(ranges)


def _active(text: str) -> int:
    depth = 0
    n = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            n += 1
    return n


def signature_help(doc, offset: int) -> Optional[Signature]:
    st = doc.state
    if not st.slots:
        return None
    index = doc.chunk_at(offset)
    slot = st.slots[index]
    start = st.starts[index] + slot.chunk.stmt_at
    if start > offset:
        return None
    stmt = doc.text[start:offset]
    stack = bracket_stack(stmt)
    opens = [(k, at) for k, at in stack if k == "("]
    if not opens:
        return None
    at = opens[-1][1]
    name = word_before(stmt[:at].rstrip())
    if not name:
        return None
    active = _active(stmt[at + 1:])
    line_start = stmt.rfind("\n", 0, at) + 1
    line = stmt[line_start:at]
    # the step a let-expression belongs to may start lines above, at its outermost bracket
    outer = stack[0][1]
    step_line = stmt[stmt.rfind("\n", 0, outer) + 1:outer]
    sig = _describe(doc, index, name, line, step_line)
    if sig is None:
        return None
    if name == "ode" and sig[0].startswith("ode(") and _ode_t0(stmt[at + 1:]):
        sig = _ode_t0_signature(BUILTINS["ode"])  # `ode(f, y0, t0, times, …)` (E9.11)
    label, params, text = sig
    n = len(params)
    if name == "fan" and n:
        active = min(active, n - 1)
    return Signature(label, params, active if active < max(n, 1) else n - 1 if n else 0, text)


def _builtin(b):
    """A let-expression builtin as its table spells it: `Builtin.signature`'s parameters
    (optional ones marked as the table marks them, `sum(x, axis?)`), a lambda parameter
    spelled with the lambda's own parameters, `fold(O, init, (s, t) -> body)`."""
    params = []
    for i, (p, _optional) in enumerate(builtin_params(b)):
        names = lambda_params(b, i)
        params.append(f"({', '.join(names)}) -> body" if names is not None else p)
    label, ranges = _label(b.name, params)
    return label, ranges, f"builtin · {b.kinds} — {b.doc}"


def _ode_t0(text: str) -> bool:
    """The arguments typed so far are `ode`'s t0 form: a fourth argument is written and it
    is not a number literal (`qvr.sema.axes_calls.ode_arguments` reads the call the same way)."""
    args = split_params(text)
    fourth = args[3].strip("()").strip() if len(args) > 3 else ""
    return bool(fourth) and re.fullmatch(r"-?\s*[0-9][0-9.]*([eE][+-]?[0-9]+)?", fourth) is None


def _ode_t0_signature(b):
    lam = lambda_params(b, 0) or ("y", "t")
    label, ranges = _label("ode", [f"({', '.join(lam)}) -> body", "y0", "t0", "times", "rtol?",
                                   "atol?"])
    return label, ranges, (f"builtin · lambda (y, t), numeric, numeric, numeric -> numeric — y at "
                           f"each of times, solving dy/dt = f(y, t) from y(t0) = y0 (Stan's t0, "
                           f"before the first output time)")


def _describe(doc, index: int, name: str, line: str, step_line: str = ""):
    head = step_line or line
    # `let v [: T] = …` (E9.11), `score v [: T] = …`, `observe v [: T] = … <- F` (E9.7)
    in_let = (re.match(r"\s*(let|score|record)\s+\w+\s*(?::[^=]*)?=", head) or (
        re.match(r"\s*observe\s+\w+\s*(?::[^=]*)?=", head) and "<-" not in head)) and not re.match(
        r"let\s", head)
    # E9.10: the arguments of a family target (`<- Normal(… where(`) are let-expressions
    in_family_args = "<-" in step_line and word_before(step_line.rstrip()) in FAMILIES
    if (in_let or in_family_args) and name in BUILTINS:
        return _builtin(BUILTINS[name])
    from qvr.sema.steering_scores import TEXT_FUNCTIONS  # E10: a steering program's score steps
    if in_let and name in TEXT_FUNCTIONS:
        f = TEXT_FUNCTIONS[name]
        label, ranges = _label(name, [p + ("..." if k == "strings" else "") for p, k in f.params])
        return label, ranges, f"text function · {f.kinds} — {f.meaning}"
    if in_let and name in FAMILIES:  # `log_density(Normal(mu, sigma), x)` (E9)
        fam = FAMILIES[name]
        label, ranges = _label(name, [p for p, _k in fam.params])
        kinds = ", ".join(f"{p}: {k}" for p, k in fam.params)
        return label, ranges, f"family · support {fam.support} — {kinds}"
    if in_let and name in MORPHISM_BUILTINS:
        return None  # a let-expression builtin outside the core there (QVR900), not a morphism
    if name in COMBINATORS:
        params, _snip, meaning = COMBINATORS[name]
        label, ranges = _label(name, list(params))
        if name == "fan":  # variadic: every argument is a morphism
            ranges = ranges[:1]
        return label, ranges, meaning
    if name in FAMILIES and ("<-" in line or "~" in line):
        fam = FAMILIES[name]
        label, ranges = _label(name, [p for p, _k in fam.params])
        kinds = ", ".join(f"{p}: {k}" for p, k in fam.params)
        return label, ranges, f"family · support {fam.support} — {kinds}"
    if "<-" in line:
        sym = doc.state.answer(("v", name), index)
        if isinstance(sym, ProgramSym) and sym.parametric:
            label, ranges = _label(name, [f"{p} : {k or '?'}" for p, k in sym.params])
            return label, ranges, "parametric program " + spell_mor(sym.type)
        if isinstance(sym, (MorphismSym, LetSym, ProgramSym)) and sym.type.known:
            facs = [spell(f) for f in factors(sym.type.dom)]
            label, ranges = _label(name, facs)
            return label, ranges, (f"{name} : {spell_mor(sym.type)} — one argument per domain factor, "
                                   f"or one argument of the whole domain")
    return None

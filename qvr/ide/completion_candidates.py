"""The candidate sets of completion (`qvr.ide.completion` picks among them by context):
keywords, types, morphisms (those whose domain matches first after `>>`), families,
constrained spaces, data sizes, the locals visible at the cursor, let-expression
candidates (builtins with snippets, lambda parameters, deductions), deduction atoms, and
the keys and values of option blocks `[...]`.  No LSP types here.
"""
from __future__ import annotations

import re
from typing import Optional

from qvr.ide import catalog as C
from qvr.ide.completion_context import FIRST_WORD, Ctx, Item, matches, step_head
from qvr.ide.textscan import bracket_stack, word_before
from qvr.sema.families import BUILTINS, FAMILIES, space_of
from qvr.sema import runnable  # E9.9
from qvr.sema.symbols import (DeductionSym, GroupSym, LetSym, MorphismSym, ObjectSym, ProgramSym)
from qvr.sema.types import compatible, is_continuous, is_discrete, is_unknown, spell, spell_mor

_BIND = re.compile(r"([ \t]*)(sample|observe|marginalize|let|score|record|data)[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
_ATOMS = re.compile(r"^[ \t]+(atoms|binders)[ \t]+(.*)$", re.M)


def keyword_items(words: dict, kind_detail: str) -> list[Item]:
    out = []
    for w, snip in words.items():
        out.append(Item(w, "keyword", kind_detail, sort="1" + w))
        out.append(Item(w, "snippet", f"{kind_detail} (snippet)", snip, True, sort="2" + w))
    return out


def type_items(c: Ctx, discrete_only: bool = False, continuous_only: bool = False) -> list[Item]:
    out = []
    for n in sorted(c.names("type")):
        sym = c.obj(n)
        if isinstance(sym, ObjectSym):
            if discrete_only and not is_discrete(sym.type):
                continue
            if continuous_only and not is_continuous(sym.type):
                continue
            out.append(Item(n, "object", spell(sym.type), sort="0" + n))
    if not (discrete_only or continuous_only):
        out += [Item("FinSet", "keyword", "finite set", "FinSet ${1:2}", True, sort="1FinSet"),
                Item("Real", "keyword", "real vector space", "Real ${1:1}", True, sort="1Real")]
    return out


_SPELLED: dict = {}  # MorType -> spelling (types are frozen and hashable); bounded below


def _spell(t) -> str:
    s = _SPELLED.get(t)
    if s is None:
        if len(_SPELLED) > 10000:
            _SPELLED.clear()
        s = _SPELLED[t] = spell_mor(t)
    return s


def _value_item(name: str, sym, sort: str = "") -> Optional[Item]:
    kind = {MorphismSym: "morphism", LetSym: "let", ProgramSym: "program", DeductionSym: "deduction",
            GroupSym: "morphism"}.get(type(sym))
    if kind is None:
        return None
    detail = _spell(sym.type)
    if isinstance(sym, GroupSym):
        detail = f"replica group of {len(sym.members)}: {detail}"
    elif isinstance(sym, ProgramSym) and sym.parametric:
        detail = "parametric program " + detail
    return Item(name, kind, detail, sort=sort or "1" + name)


def morphism_items(c: Ctx, codomain=None, groups: bool = False) -> list[Item]:
    """Morphism-valued names before the statement; those whose domain is compatible with
    `codomain` (the chain so far) rank first.  Only names matching the typed prefix are
    looked at, compatibility is decided once per distinct domain type, and items are built
    only for the best `c.limit` (anything after them could not be shown anyway)."""
    ranked = []
    fits: dict = {}
    for n in c.names("value"):
        if c.prefix and not matches(c.prefix, n):
            continue
        sym = c.value(n)
        if isinstance(sym, (DeductionSym,)) or (isinstance(sym, ProgramSym) and sym.parametric):
            continue
        if isinstance(sym, GroupSym) and not groups:
            continue
        rank = "1"
        t = getattr(sym, "type", None)
        if codomain is not None and t is not None:
            ok = fits.get(t.dom)
            if ok is None:
                ok = fits[t.dom] = not is_unknown(t.dom) and compatible(t.dom, codomain)
            rank = "0" if ok else "1"
        ranked.append((rank + n, n, sym))
    ranked.sort(key=lambda r: r[0])
    if len(ranked) > c.limit:
        c.truncated = True
        del ranked[c.limit:]
    out = []
    for key, n, sym in ranked:
        item = _value_item(n, sym, key)
        if item is not None:
            out.append(item)
    for name, (params, snip, meaning) in C.COMBINATORS.items():
        if name == "from_data":
            continue
        out.append(Item(name, "combinator", f"{name}({', '.join(params)})", snip, True, "2" + name, meaning))
    return out


def family_items(step: bool, only=None, improper: bool = True, runs: bool = True) -> list[Item]:
    """Families usable as step targets (`step`) or kernels.  A family without parameters is
    inserted without parentheses; the improper `Flat` and `HalfFlat` (E9, sample targets
    only) are left out unless `improper`; with `runs`, so are the families the runtime does
    not build in that position (E9.9: the checker reports QVR950 for them)."""
    out = []
    for fam in FAMILIES.values():
        usable = fam.step if step else fam.kernel
        if usable == "no" or (only is not None and fam.name not in only):
            continue
        if runs and not (runnable.step_supported if step else runnable.kernel_supported)(fam.name):
            continue
        if step and getattr(fam, "improper", False) and not improper:
            continue
        if step and fam.params:
            args = ", ".join(f"${{{i + 1}:{p}}}" for i, (p, _k) in enumerate(fam.params))
            out.append(Item(fam.name, "family", fam.signature, f"{fam.name}({args})", True, "1" + fam.name,
                            fam.support_text))
        else:
            out.append(Item(fam.name, "family", fam.signature, sort="1" + fam.name, doc=fam.support_text))
    return out


def _space_objects(c: Ctx) -> list[Item]:
    out = []
    for n in sorted(c.names("type")):
        sym = c.obj(n)
        if isinstance(sym, ObjectSym) and space_of(sym.type) is not None:
            out.append(Item(n, "object", spell(sym.type), sort="0" + n))
    return out


def data_size_items() -> list[Item]:
    """`FinSet N` / `Real N` on an object's right-hand side: a size read from the data."""
    return [Item(f"{k} N", "keyword", meaning, f"{k} ${{1:N}}", True, f"1{k}N", meaning)
            for k, meaning in (("FinSet", "finite set whose size is read from the data"),
                               ("Real", "real vector space whose dimension is read from the data"))]


def space_items() -> list[Item]:
    """The constrained vector spaces of an object declaration (E9): `Simplex 3`, …"""
    return [Item(n, "keyword", meaning, snip, True, "2" + n, meaning) for n, (snip, meaning) in C.SPACES.items()]


def local_items(c: Ctx) -> list[Item]:
    """Locals of the program being edited that are visible at the cursor (text-based)."""
    if c.keyword != "program":
        return []
    lines = c.stmt.split("\n")
    out: dict[str, str] = {}
    header = lines[0]
    pm = re.match(r"\s*program\s+[A-Za-z_]\w*\s*\(([^)]*)\)", header)
    body = lines[1:-1] if len(lines) > 1 else []
    min_indent = c.indent if len(lines) > 1 else 1 << 30
    for ln in reversed(body):
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        ind = len(ln) - len(ln.lstrip(" \t"))
        m = _BIND.match(ln)
        if m:
            visible = ind <= min_indent if m.group(2) != "marginalize" else ind < min_indent
            if visible:
                out.setdefault(m.group(3), m.group(2))
        min_indent = min(min_indent, ind)
    if pm:
        for p in pm.group(1).split(","):
            name = p.split(":")[0].strip()
            if name:
                out.setdefault(name, "parameter")
    types = {}
    if c.slot is not None and c.slot.result is not None:
        for f in c.slot.result.facts:
            if f.kind == "local":
                types.setdefault(f.data.name, f.data.type_text)
    return [Item(n, "local", types.get(n, k), sort="0" + n) for n, k in sorted(out.items())]


def _builtin_snippet(b) -> str:
    """`name(${1:x})`: the required parameters of a let-expression builtin as placeholders
    (optional ones are left out); a lambda parameter becomes `(${3:s}, ${4:t}) -> ${5:body}`
    with the parameter names of the table (`fold`'s `lambda (s, t)`)."""
    parts, n = [], 0
    for i, (p, optional) in enumerate(C.builtin_params(b)):
        if optional:
            break
        names = C.lambda_params(b, i)
        if names is not None:
            holes = []
            for q in names:
                n += 1
                holes.append(f"${{{n}:{q}}}")
            n += 1
            parts.append(f"({', '.join(holes)}) -> ${{{n}:body}}")
        else:
            n += 1
            parts.append(f"${{{n}:{C.param_name(p)}}}")
    return f"{b.name}({', '.join(parts)})"


_LAMBDA = re.compile(r"\(\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*\)\s*->|([A-Za-z_]\w*)\s*->")


def _lambda_params(c: Ctx) -> list[Item]:
    """Parameters of the lambdas whose body the cursor is in (`(s, t) -> s + |`): a lambda's
    body runs to the end of the argument it starts, so it is open when the bracket around it
    is still open and no comma of that bracket follows its arrow."""
    out: dict[str, None] = {}
    stmt = c.stmt
    if not c.stack:
        return []
    base = c.stack[0][1]  # a lambda is an argument: it lies inside the outermost open bracket
    opens = {at - base for _k, at in c.stack}
    for m in _LAMBDA.finditer(stmt, base):
        around = bracket_stack(stmt[base:m.start()])
        if not around or around[-1][1] not in opens:
            continue
        depth, open_ = 0, True
        for ch in stmt[m.end():]:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth < 0:
                    open_ = False
                    break
            elif ch == "," and depth == 0:
                open_ = False
                break
        if open_:
            for n in (m.group(1) or m.group(2)).split(","):
                out[n.strip()] = None
    return [Item(n, "local", "lambda parameter", sort="0" + n) for n in out]


_SAMPLE_STEP = re.compile(r"^[ \t]+sample[ \t]+(\w+)[ \t]*<-[ \t]*(\w+)[ \t]*$", re.M)


def steering_token(c: Ctx) -> Optional[str]:
    """E10: the token a steering program samples from a pretrained morphism (`sample NAME
    <- LM`) when the cursor is in one of its score steps, else None."""
    head = FIRST_WORD.match(step_head(c))
    if c.keyword != "program" or not head or head.group(1) != "score":
        return None
    for m in _SAMPLE_STEP.finditer(c.stmt):
        sym = c.value(m.group(2))
        if isinstance(sym, MorphismSym) and sym.role == "pretrained":
            return m.group(1)
    return None


def text_function_items(token: str) -> list[Item]:
    """E10: the text functions of a steering program's score steps, `token` first."""
    from qvr.sema.steering_scores import TEXT_FUNCTIONS
    out = []
    for f in TEXT_FUNCTIONS.values():
        args, n = [token], 1
        for p, k in f.params[1:]:
            n += 1
            args.append(f'"${{{n}:{p}}}"' if k in ("string", "strings") else f"${{{n}:{p}}}")
        out.append(Item(f.name, "builtin", f"{f.signature} · text function · {f.kinds}",
                        f"{f.name}({', '.join(args)})", True, "0" + f.name, f.meaning))
    return out


def letexpr_items(c: Ctx) -> list[Item]:
    out = _lambda_params(c)
    seen = {i.label for i in out}
    out += [i for i in local_items(c) if i.label not in seen]
    token = steering_token(c)  # E10: a steering program's score step
    if token is not None:
        out += text_function_items(token)
    for b in BUILTINS.values():
        out.append(Item(b.name, "builtin", f"{b.signature} · {b.kinds}", _builtin_snippet(b), True,
                        "1" + b.name, b.doc))
    for n in sorted(c.names("value")):
        sym = c.value(n)
        if isinstance(sym, DeductionSym):
            out.append(Item(n, "deduction", "deduction " + spell_mor(sym.type), sort="1" + n))
    out.append(Item("factor", "keyword", "factor expression", "factor ${1:i} : ${2:I} in ${0}", True, "2factor"))
    out += [Item(w, "keyword", d, sort="2" + w) for w, d in C.LOGIC_KEYWORDS.items()]  # E9.10
    return out


def in_family_args(c: Ctx) -> bool:
    """The cursor is inside the arguments of a family target (`<- Normal(…`): a
    let-expression there (E9.10)."""
    if not c.stack or c.stack[0][0] != "(":
        return False
    head = step_head(c)
    return "<-" in head and word_before(head.rstrip()) in FAMILIES


def atom_items(c: Ctx, binders: bool = True) -> list[Item]:
    out = {}
    for m in _ATOMS.finditer(c.stmt):
        if m.group(1) == "binders" and not binders:
            continue
        for n in re.findall(r"[A-Za-z_]\w*", m.group(2).split("#")[0]):
            out.setdefault(n, "atom" if m.group(1) == "atoms" else "binder")
    return [Item(n, "value", k, sort="0" + n) for n, k in sorted(out.items())]


# ---------------------------------------------------------------- option blocks

def option_owner(c: Ctx) -> str:
    first = FIRST_WORD.match(c.line_head)
    word = first.group(1) if first else ""
    if c.keyword == "program" and word in ("sample", "observe", "marginalize"):
        return f"{word} step"
    if c.keyword in ("object", "morphism", "deduction"):
        return c.keyword
    return ""


def _axis_names(c: Ctx) -> list[Item]:
    m = re.match(r"\s*morphism\s+\w+\s*:\s*([^\[~]*)", c.stmt)
    names = ["dom", "cod"]
    if m:
        for n in re.findall(r"[A-Za-z_]\w*", m.group(1)):
            if n not in ("FinSet", "Real") and n not in names:
                names.append(n)
    return [Item(n, "value", "axis", sort=f"0{i:03d}") for i, n in enumerate(names)]


def option_value_items(c: Ctx, owner: str, key: str) -> list[Item]:
    if key in C.OPTION_VALUES and not (owner == "marginalize step" and key == "over"):
        return [Item(v, "value", f"{key} value", sort="0" + v) for v in C.OPTION_VALUES[key]]
    if owner == "morphism" and key in ("over", "iid"):
        return _axis_names(c)
    if owner == "morphism" and key == "model":  # E10: model folders beside the file, cache
        from qvr.sema.pretrained import base_dir_of, model_choices
        found = model_choices(base_dir_of(getattr(c.doc, "path", None)))
        return [Item(f'"{name}"', "value", where, sort=f"0{i:03d}")
                for i, (name, where) in enumerate(found)]
    if owner == "sample step" and key == "over":
        # finite sets, and the constrained spaces of E9 (`over=Mu` with `Mu : Simplex 3`)
        return type_items(c, discrete_only=True) + _space_objects(c)
    if owner in ("sample step", "marginalize step") and key in ("over", "iid_over"):
        return type_items(c, discrete_only=True)
    if owner == "observe step" and key == "via":
        return local_items(c)
    if owner in ("sample step", "observe step") and key in ("lower", "upper"):
        return local_items(c)  # truncation bounds (E9): a number, a local or host data
    if owner == "deduction" and key == "start":
        return [i for i in atom_items(c, binders=False)]
    return []


def _option_keys(c: Ctx, owner: str, block_text: str) -> list[Item]:
    keys = dict(C.OPTION_DOCS.get(owner, {}))
    if owner == "morphism":
        m = re.search(r"\brole\s*=\s*(\w+)", c.stmt)
        if m and m.group(1) in C.ROLE_KEYS:
            keys = {k: v for k, v in keys.items() if k in C.ROLE_KEYS[m.group(1)]}
    # keys already written: `key=value` entries and bare flags (`causal`)
    given = set(re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)\s*(?==|,)", block_text))
    return [Item(k, "option", doc, k if k in C.FLAG_KEYS else f"{k}=", False, "0" + k, doc)
            for k, doc in keys.items() if k not in given]


def option_block_items(c: Ctx, opener: int) -> list[Item]:
    inner = c.stmt[opener + 1:]
    segment = re.split(r",", inner)[-1]
    owner = option_owner(c)
    if "=" in segment:
        key = segment.split("=")[0].strip()
        return option_value_items(c, owner, key)
    return _option_keys(c, owner, inner)

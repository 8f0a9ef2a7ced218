"""Completion that knows where the cursor is, even in half-written text.

The context is read from the text of the current statement before the cursor (the code
being typed rarely parses): the statement keyword, the innermost open bracket, the
current step or entry line and the token before the word being typed.  Candidates come
from the module environment *before* the current statement (`ModuleState.answer`, so a
name declared later is never offered), from the family and builtin tables, and from the
locals visible at the cursor.  Contexts: statement, step and deduction-entry keywords
(with snippets); types; families after `~` or `<-`; option keys inside `[...]` and their
values (`role=`, `reduction=`, `over=` …); morphism expressions, where after `>>` the
morphisms whose domain matches the codomain so far come first; let-expressions (locals,
builtins, deductions); deduction atoms.  The statistics extension (docs/extensions.md
E9): `data` and `record` steps; every builtin of `qvr.sema.families.BUILTINS` with a
snippet of its required parameters (a lambda as `(s, t) -> body`); objects where the
table says a parameter is an object (`sum(x, O)`, `fold(O, …)`, `eye(O)`), families in
`log_density(`; lambda parameters inside the lambda's body; `Flat`/`HalfFlat` after
`sample … <-`, without parentheses; `lower`/`upper` on sample and observe steps; the
constrained spaces after `object X :`.  No LSP types here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from qvr.ide import catalog as C
from qvr.ide.exprtype import chain_codomain
from qvr.ide.textscan import bracket_stack, in_comment_or_string, word_before
from qvr.sema.families import BUILTINS, FAMILIES, space_of
from qvr.sema import runnable  # E9.9
from qvr.sema.symbols import (DeductionSym, GroupSym, LetSym, MorphismSym, ObjectSym, ProgramSym)
from qvr.sema.types import compatible, is_continuous, is_discrete, is_unknown, spell, spell_mor
from qvr.text import Span

_WORD_START = re.compile(r"[A-Za-z0-9_]*")
_FIRST = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")
_BIND = re.compile(r"([ \t]*)(sample|observe|marginalize|let|score|record|data)[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
_ATOMS = re.compile(r"^[ \t]+(atoms|binders)[ \t]+(.*)$", re.M)


@dataclass(frozen=True)
class Item:
    label: str
    kind: str  # keyword | snippet | object | morphism | let | program | deduction | family | builtin |
    #            local | option | value | combinator
    detail: str = ""
    insert: str = ""  # text to insert (defaults to label)
    snippet: bool = False
    sort: str = ""  # sort key (defaults to label)
    doc: str = ""


@dataclass(frozen=True)
class Completions:
    span: Span  # the range the chosen item replaces (the word around the cursor)
    items: tuple[Item, ...]
    incomplete: bool = False  # truncated to `limit`: ask again as the word grows


class _Ctx:
    """Everything completion needs to know about the cursor position."""

    def __init__(self, doc, offset: int):
        self.doc = doc
        st = doc.state
        self.index = doc.chunk_at(offset) if st.slots else 0
        self.slot = st.slots[self.index] if st.slots else None
        base = st.starts[self.index] if st.slots else 0
        text = doc.text
        line_start = text.rfind("\n", 0, offset) + 1
        self.line = text[line_start:offset]
        self.prefix = word_before(self.line)
        end = _WORD_START.match(text, offset).end()
        self.span = Span(offset - len(self.prefix), end)
        chunk = self.slot.chunk if self.slot else None
        stmt_at = base + (chunk.stmt_at if chunk else 0)
        self.stmt = text[stmt_at:offset - len(self.prefix)] if stmt_at <= offset else ""
        self.in_trivia = stmt_at > offset - len(self.prefix) or not self.stmt.strip()
        self.line_head = self.line[:len(self.line) - len(self.prefix)]
        self.indent = len(self.line) - len(self.line.lstrip(" \t"))
        fm = _FIRST.match(self.stmt)
        self.keyword = fm.group(1) if fm else ""
        self.stack = bracket_stack(self.stmt)
        self.limit = 200
        self.truncated = False

    # environment before the current statement
    def names(self, ns: str):
        return self.doc.state.answer(("names", ns), self.index) if self.slot else frozenset()

    def value(self, name: str):
        return self.doc.state.answer(("v", name), self.index)

    def obj(self, name: str):
        return self.doc.state.answer(("t", name), self.index)


# ---------------------------------------------------------------- candidate sets

def _keywords(words: dict, kind_detail: str) -> list[Item]:
    out = []
    for w, snip in words.items():
        out.append(Item(w, "keyword", kind_detail, sort="1" + w))
        out.append(Item(w, "snippet", f"{kind_detail} (snippet)", snip, True, sort="2" + w))
    return out


def _types(c: _Ctx, discrete_only: bool = False, continuous_only: bool = False) -> list[Item]:
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


def _morphisms(c: _Ctx, codomain=None, groups: bool = False) -> list[Item]:
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


def _families(step: bool, only=None, improper: bool = True, runs: bool = True) -> list[Item]:
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


def _space_objects(c: _Ctx) -> list[Item]:
    out = []
    for n in sorted(c.names("type")):
        sym = c.obj(n)
        if isinstance(sym, ObjectSym) and space_of(sym.type) is not None:
            out.append(Item(n, "object", spell(sym.type), sort="0" + n))
    return out


def _data_sizes() -> list[Item]:
    """`FinSet N` / `Real N` on an object's right-hand side: a size read from the data."""
    return [Item(f"{k} N", "keyword", meaning, f"{k} ${{1:N}}", True, f"1{k}N", meaning)
            for k, meaning in (("FinSet", "finite set whose size is read from the data"),
                               ("Real", "real vector space whose dimension is read from the data"))]


def _spaces() -> list[Item]:
    """The constrained vector spaces of an object declaration (E9): `Simplex 3`, …"""
    return [Item(n, "keyword", meaning, snip, True, "2" + n, meaning) for n, (snip, meaning) in C.SPACES.items()]


def _visible_locals(c: _Ctx) -> list[Item]:
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


def _lambda_params(c: _Ctx) -> list[Item]:
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


def _letexpr(c: _Ctx) -> list[Item]:
    out = _lambda_params(c)
    seen = {i.label for i in out}
    out += [i for i in _visible_locals(c) if i.label not in seen]
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


def _in_family_args(c: _Ctx) -> bool:
    """The cursor is inside the arguments of a family target (`<- Normal(…`): a
    let-expression there (E9.10)."""
    if not c.stack or c.stack[0][0] != "(":
        return False
    head = _step_head(c)
    return "<-" in head and word_before(head.rstrip()) in FAMILIES


def _atoms(c: _Ctx, binders: bool = True) -> list[Item]:
    out = {}
    for m in _ATOMS.finditer(c.stmt):
        if m.group(1) == "binders" and not binders:
            continue
        for n in re.findall(r"[A-Za-z_]\w*", m.group(2).split("#")[0]):
            out.setdefault(n, "atom" if m.group(1) == "atoms" else "binder")
    return [Item(n, "value", k, sort="0" + n) for n, k in sorted(out.items())]


# ---------------------------------------------------------------- option blocks

def _option_owner(c: _Ctx) -> str:
    first = _FIRST.match(c.line_head)
    word = first.group(1) if first else ""
    if c.keyword == "program" and word in ("sample", "observe", "marginalize"):
        return f"{word} step"
    if c.keyword in ("object", "morphism", "deduction"):
        return c.keyword
    return ""


def _axis_names(c: _Ctx) -> list[Item]:
    m = re.match(r"\s*morphism\s+\w+\s*:\s*([^\[~]*)", c.stmt)
    names = ["dom", "cod"]
    if m:
        for n in re.findall(r"[A-Za-z_]\w*", m.group(1)):
            if n not in ("FinSet", "Real") and n not in names:
                names.append(n)
    return [Item(n, "value", "axis", sort=f"0{i:03d}") for i, n in enumerate(names)]


def _option_values(c: _Ctx, owner: str, key: str) -> list[Item]:
    if key in C.OPTION_VALUES and not (owner == "marginalize step" and key == "over"):
        return [Item(v, "value", f"{key} value", sort="0" + v) for v in C.OPTION_VALUES[key]]
    if owner == "morphism" and key in ("over", "iid"):
        return _axis_names(c)
    if owner == "sample step" and key == "over":
        # finite sets, and the constrained spaces of E9 (`over=Mu` with `Mu : Simplex 3`)
        return _types(c, discrete_only=True) + _space_objects(c)
    if owner in ("sample step", "marginalize step") and key in ("over", "iid_over"):
        return _types(c, discrete_only=True)
    if owner == "observe step" and key == "via":
        return _visible_locals(c)
    if owner in ("sample step", "observe step") and key in ("lower", "upper"):
        return _visible_locals(c)  # truncation bounds (E9): a number, a local or host data
    if owner == "deduction" and key == "start":
        return [i for i in _atoms(c, binders=False)]
    return []


def _option_keys(c: _Ctx, owner: str, block_text: str) -> list[Item]:
    keys = dict(C.OPTION_DOCS.get(owner, {}))
    if owner == "morphism":
        m = re.search(r"\brole\s*=\s*(\w+)", c.stmt)
        if m and m.group(1) in C.ROLE_KEYS:
            keys = {k: v for k, v in keys.items() if k in C.ROLE_KEYS[m.group(1)]}
    # keys already written: `key=value` entries and bare flags (`causal`)
    given = set(re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)\s*(?==|,)", block_text))
    return [Item(k, "option", doc, k if k in C.FLAG_KEYS else f"{k}=", False, "0" + k, doc)
            for k, doc in keys.items() if k not in given]


def _in_option_block(c: _Ctx, opener: int) -> list[Item]:
    inner = c.stmt[opener + 1:]
    segment = re.split(r",", inner)[-1]
    owner = _option_owner(c)
    if "=" in segment:
        key = segment.split("=")[0].strip()
        return _option_values(c, owner, key)
    return _option_keys(c, owner, inner)


# ---------------------------------------------------------------- the driver

def _expr_start(c: _Ctx) -> int:
    """Offset in `c.stmt` where the morphism expression around the cursor starts."""
    if c.stack and c.stack[-1][0] == "(":
        at = c.stack[-1][1] + 1
        comma = c.stmt.rfind(",", at)
        return max(at, comma + 1)
    m = None
    for m in re.finditer(r"=|~|\bexport\b", c.stmt):
        pass
    return m.end() if m else len(c.stmt)


def _morph_context(c: _Ctx) -> list[Item]:
    seg = c.stmt[_expr_start(c):].rstrip()
    cod = None
    if seg.endswith(">>"):
        cod = chain_codomain(c.doc, c.index, seg[:-2].replace("\n", " "))
    in_fan = bool(c.stack) and c.stmt[:c.stack[-1][1]].rstrip().endswith("fan")
    return _morphisms(c, cod, groups=in_fan)


def _step_head(c: _Ctx) -> str:
    """The text of the step line that the open brackets at the cursor belong to (a let
    expression may continue over several lines inside its brackets)."""
    first_open = c.stack[0][1] if c.stack else len(c.stmt)
    return c.stmt[c.stmt.rfind("\n", 0, first_open) + 1:first_open]


def _arg_index(text: str) -> int:
    """The index of the argument being typed: commas at depth 0 in `text` (after the `(`)."""
    depth = n = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            n += 1
    return n


def _letexpr_call(c: _Ctx, name: str, opener: int) -> list[Item]:
    """Inside `name(` in a let-expression: objects where the builtin takes an object (the
    axis of `sum(x, O)`, the index set of `fold(O, …)`, `scan(O, …)`, `eye(O)`), else the
    let-expression candidates."""
    b = BUILTINS.get(name)
    if b is not None:
        i = _arg_index(c.stmt[opener + 1:])
        if C.is_family_param(b, i):  # `log_density(|`: families with parameters
            return [f for f in _families(step=True, improper=False)
                    if f.label not in runnable.SPACE_FAMILIES]  # E9.9: QVR950 there
        if C.is_object_param(b, i):
            objects = _types(c, discrete_only=True)
            return objects if C.is_only_object_param(b, i) else objects + _letexpr(c)
    return _letexpr(c)


def _observed_value(head: str) -> bool:
    """E9.7: the cursor is in the `= e` of `observe v [: T] = e <- F(…)`."""
    first = _FIRST.match(head)
    return bool(first) and first.group(1) == "observe" and "<-" not in head and "=" in head


def _paren_context(c: _Ctx, opener: int) -> Optional[list[Item]]:
    before = c.stmt[:opener].rstrip()
    name = word_before(before)
    if c.keyword == "program":
        head = _step_head(c)
        first = _FIRST.match(head)
        if first and first.group(1) in ("let", "score", "record") and "=" in head \
                or _observed_value(head):  # E9.7 `observe v = e <- F`
            return _letexpr_call(c, name, opener)
        if _in_family_args(c):  # E9.10: family arguments are let-expressions
            return _letexpr(c) if len(c.stack) == 1 else _letexpr_call(c, name, opener)
    if name == "identity":
        return _types(c, discrete_only=True)
    if name in ("layer_norm", "rms_norm") and c.keyword in ("let", "export", "morphism"):
        return _types(c, continuous_only=True)
    if name in ("fan", "stack", "repeat", "scan", "residual"):
        return _morph_context(c)
    if c.keyword == "deduction":
        return _atoms(c)
    if c.keyword == "program":
        head = c.line_head
        if "<-" in head:
            return _visible_locals(c)
        return []
    if c.keyword in ("let", "export", "morphism"):
        return _morph_context(c)
    return []


_SEGMENT = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def matches(prefix: str, label: str) -> bool:
    """The label starts with the prefix, or one of its words does (`Norm` finds
    `LogNormal`, `hid` finds `hidden_dim`, `dim` finds `hidden_dim`); case-insensitive."""
    p = prefix.lower()
    if label.lower().startswith(p):
        return True
    return any(label[m.start():].lower().startswith(p) for m in _SEGMENT.finditer(label))


def complete(doc, offset: int, limit: int = 200) -> Completions:
    """Candidates at `offset`, best first; at most `limit` of them (then `incomplete`)."""
    c = _Ctx(doc, offset)
    c.limit = limit
    items = _items(c)
    if c.prefix:
        items = [i for i in items if matches(c.prefix, i.label)]
    items.sort(key=lambda i: (i.sort or i.label, i.kind))
    return Completions(c.span, tuple(items[:limit]), len(items) > limit or c.truncated)


def _items(c: _Ctx) -> list[Item]:
    if in_comment_or_string(c.line_head):
        return []
    if c.in_trivia or (c.indent == 0 and not c.line_head.strip() and not c.stack):
        return _keywords(C.STATEMENT_SNIPPETS, "statement")
    if c.stack:
        kind, at = c.stack[-1]
        if kind == "#[":
            return [Item(k, "option", v, sort="0" + k, doc=v) for k, v in C.OPTION_DOCS["pragma"].items()]
        if kind == "[" and c.keyword == "program" and _in_family_args(c):
            return _letexpr(c)  # an index inside a family argument (E9.10)
        if kind == "[" and c.keyword == "program":
            head = _FIRST.match(_step_head(c))
            if head and head.group(1) in ("let", "score", "record") and "=" in _step_head(c) \
                    or _observed_value(_step_head(c)):
                return _letexpr(c)  # a list literal or an index inside a let-expression (E9)
        if kind == "[":
            # a list value `over=[a, |`: the key is before the enclosing `[`
            outer = c.stmt[:at].rstrip()
            if outer.endswith("=") and len(c.stack) >= 2 and c.stack[-2][0] == "[":
                key = word_before(outer[:-1].rstrip())
                return _option_values(c, _option_owner(c), key)
            return _in_option_block(c, at)
        if kind == "(":
            res = _paren_context(c, at)
            if res is not None:
                return res
        return []
    head = c.line_head
    stripped = head.strip()
    kw = c.keyword
    if kw == "composition":
        return ([Item(l, "value", "composition level", sort=f"0{i:03d}") for i, l in enumerate(C.LEVELS)]
                if re.search(r"\bas\s*$", head) else
                [Item(r, "value", "composition rule", sort="0" + r) for r in C.COMPOSITION_RULE_NAMES])
    if kw == "program" and c.indent > 0:
        if not stripped:
            return _keywords(C.STEP_SNIPPETS, "step")
        first = _FIRST.match(head).group(1) if _FIRST.match(head) else ""
        if _observed_value(head):  # E9.7 `observe v [: T] = e <- F`: e is a let-expression
            return _letexpr(c)
        if first in ("score", "let", "record") and ":" in head and "=" not in head:
            # E9.7 `score v : T = e`, E9.11 `let v : T = e`
            return _types(c, discrete_only=True)
        if "<-" in head:
            # improper families without parameters (`Flat`, `HalfFlat`) are sample targets only
            return [i for i in _morphisms(c) if i.kind != "combinator"] + _families(
                step=True, improper=first == "sample")
        if first in ("let", "score", "record") and "=" in head:
            return _letexpr(c)
        if first == "return":
            return _visible_locals(c)
        if first in ("sample", "observe", "marginalize") and ":" in head:
            return _types(c, discrete_only=True)
        if first == "data" and ":" in head:
            return [i for i in _types(c) if i.kind == "object"]
        return []
    if kw == "deduction" and c.indent > 0:
        if not stripped:
            return _keywords(C.ENTRY_SNIPPETS, "deduction entry")
        first = _FIRST.match(head).group(1) if _FIRST.match(head) else ""
        if first == "rule" and ":" in head:
            return _atoms(c)
        if stripped.startswith('"'):
            return _atoms(c, binders="=" in head)
        return []
    if kw in ("object", "morphism", "program", "deduction"):
        if kw == "morphism" and "~" in c.stmt:
            role = re.search(r"\brole\s*=\s*(\w+)", c.stmt)
            if role and role.group(1) in ("kernel", "latent"):  # a latent's prior: any family
                return _families(step=False, runs=role.group(1) == "kernel")
            if role and role.group(1) == "attention":
                return _families(step=False, only=C.ATTENTION_FAMILIES)
            if role and role.group(1) in ("let", "observed"):
                return _morph_context(c)
            return _families(step=False) + _morph_context(c)
        if ":" in c.stmt:
            if kw == "object":
                return _types(c) + _data_sizes() + _spaces()
            return _types(c)
        return []
    if kw in ("let", "export") and (kw == "export" or "=" in c.stmt):
        return _morph_context(c)
    return []

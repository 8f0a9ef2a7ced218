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

This module is the driver (`complete`); where the cursor is is `completion_context`'s,
the candidate sets are `completion_candidates`'.
"""
from __future__ import annotations

import re
from typing import Optional

from qvr.ide import catalog as C
from qvr.ide.completion_candidates import (atom_items, data_size_items, family_items,
                                           in_family_args, keyword_items, letexpr_items,
                                           local_items, morphism_items, option_block_items,
                                           option_owner, option_value_items, space_items,
                                           type_items)
from qvr.ide.completion_context import FIRST_WORD, Completions, Ctx, Item, matches, step_head
from qvr.ide.exprtype import chain_codomain
from qvr.ide.textscan import in_comment_or_string, word_before
from qvr.sema.families import BUILTINS
from qvr.sema import runnable  # E9.9


def _expr_start(c: Ctx) -> int:
    """Offset in `c.stmt` where the morphism expression around the cursor starts."""
    if c.stack and c.stack[-1][0] == "(":
        at = c.stack[-1][1] + 1
        comma = c.stmt.rfind(",", at)
        return max(at, comma + 1)
    m = None
    for m in re.finditer(r"=|~|\bexport\b", c.stmt):
        pass
    return m.end() if m else len(c.stmt)


def _morph_context(c: Ctx) -> list[Item]:
    seg = c.stmt[_expr_start(c):].rstrip()
    cod = None
    if seg.endswith(">>"):
        cod = chain_codomain(c.doc, c.index, seg[:-2].replace("\n", " "))
    in_fan = bool(c.stack) and c.stmt[:c.stack[-1][1]].rstrip().endswith("fan")
    return morphism_items(c, cod, groups=in_fan)


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


def _letexpr_call(c: Ctx, name: str, opener: int) -> list[Item]:
    """Inside `name(` in a let-expression: objects where the builtin takes an object (the
    axis of `sum(x, O)`, the index set of `fold(O, …)`, `scan(O, …)`, `eye(O)`), else the
    let-expression candidates."""
    b = BUILTINS.get(name)
    if b is not None:
        i = _arg_index(c.stmt[opener + 1:])
        if C.is_family_param(b, i):  # `log_density(|`: families with parameters
            return [f for f in family_items(step=True, improper=False)
                    if f.label not in runnable.SPACE_FAMILIES]  # E9.9: QVR950 there
        if C.is_object_param(b, i):
            objects = type_items(c, discrete_only=True)
            return objects if C.is_only_object_param(b, i) else objects + letexpr_items(c)
    return letexpr_items(c)


def _observed_value(head: str) -> bool:
    """E9.7: the cursor is in the `= e` of `observe v [: T] = e <- F(…)`."""
    first = FIRST_WORD.match(head)
    return bool(first) and first.group(1) == "observe" and "<-" not in head and "=" in head


def _paren_context(c: Ctx, opener: int) -> Optional[list[Item]]:
    before = c.stmt[:opener].rstrip()
    name = word_before(before)
    if c.keyword == "program":
        head = step_head(c)
        first = FIRST_WORD.match(head)
        if first and first.group(1) in ("let", "score", "record") and "=" in head \
                or _observed_value(head):  # E9.7 `observe v = e <- F`
            return _letexpr_call(c, name, opener)
        if in_family_args(c):  # E9.10: family arguments are let-expressions
            return letexpr_items(c) if len(c.stack) == 1 else _letexpr_call(c, name, opener)
    if name == "identity":
        return type_items(c, discrete_only=True)
    if name in ("layer_norm", "rms_norm") and c.keyword in ("let", "export", "morphism"):
        return type_items(c, continuous_only=True)
    if name in ("fan", "stack", "repeat", "scan", "residual"):
        return _morph_context(c)
    if c.keyword == "deduction":
        return atom_items(c)
    if c.keyword == "program":
        head = c.line_head
        if "<-" in head:
            return local_items(c)
        return []
    if c.keyword in ("let", "export", "morphism"):
        return _morph_context(c)
    return []


def complete(doc, offset: int, limit: int = 200) -> Completions:
    """Candidates at `offset`, best first; at most `limit` of them (then `incomplete`)."""
    c = Ctx(doc, offset)
    c.limit = limit
    items = _items(c)
    if c.prefix:
        items = [i for i in items if matches(c.prefix, i.label)]
    items.sort(key=lambda i: (i.sort or i.label, i.kind))
    return Completions(c.span, tuple(items[:limit]), len(items) > limit or c.truncated)


def _items(c: Ctx) -> list[Item]:
    if in_comment_or_string(c.line_head):
        return []
    if c.in_trivia or (c.indent == 0 and not c.line_head.strip() and not c.stack):
        return keyword_items(C.STATEMENT_SNIPPETS, "statement")
    if c.stack:
        kind, at = c.stack[-1]
        if kind == "#[":
            return [Item(k, "option", v, sort="0" + k, doc=v) for k, v in C.OPTION_DOCS["pragma"].items()]
        if kind == "[" and c.keyword == "program" and in_family_args(c):
            return letexpr_items(c)  # an index inside a family argument (E9.10)
        if kind == "[" and c.keyword == "program":
            head = FIRST_WORD.match(step_head(c))
            if head and head.group(1) in ("let", "score", "record") and "=" in step_head(c) \
                    or _observed_value(step_head(c)):
                return letexpr_items(c)  # a list literal or an index inside a let-expression (E9)
        if kind == "[":
            # a list value `over=[a, |`: the key is before the enclosing `[`
            outer = c.stmt[:at].rstrip()
            if outer.endswith("=") and len(c.stack) >= 2 and c.stack[-2][0] == "[":
                key = word_before(outer[:-1].rstrip())
                return option_value_items(c, option_owner(c), key)
            return option_block_items(c, at)
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
            return keyword_items(C.STEP_SNIPPETS, "step")
        first = FIRST_WORD.match(head).group(1) if FIRST_WORD.match(head) else ""
        if _observed_value(head):  # E9.7 `observe v [: T] = e <- F`: e is a let-expression
            return letexpr_items(c)
        if first in ("score", "let", "record") and ":" in head and "=" not in head:
            # E9.7 `score v : T = e`, E9.11 `let v : T = e`
            return type_items(c, discrete_only=True)
        if "<-" in head:
            # improper families without parameters (`Flat`, `HalfFlat`) are sample targets only
            return [i for i in morphism_items(c) if i.kind != "combinator"] + family_items(
                step=True, improper=first == "sample")
        if first in ("let", "score", "record") and "=" in head:
            return letexpr_items(c)
        if first == "return":
            return local_items(c)
        if first in ("sample", "observe", "marginalize") and ":" in head:
            return type_items(c, discrete_only=True)
        if first == "data" and ":" in head:
            return [i for i in type_items(c) if i.kind == "object"]
        return []
    if kw == "deduction" and c.indent > 0:
        if not stripped:
            return keyword_items(C.ENTRY_SNIPPETS, "deduction entry")
        first = FIRST_WORD.match(head).group(1) if FIRST_WORD.match(head) else ""
        if first == "rule" and ":" in head:
            return atom_items(c)
        if stripped.startswith('"'):
            return atom_items(c, binders="=" in head)
        return []
    if kw in ("object", "morphism", "program", "deduction"):
        if kw == "morphism" and "~" in c.stmt:
            role = re.search(r"\brole\s*=\s*(\w+)", c.stmt)
            if role and role.group(1) in ("kernel", "latent"):  # a latent's prior: any family
                return family_items(step=False, runs=role.group(1) == "kernel")
            if role and role.group(1) == "attention":
                return family_items(step=False, only=C.ATTENTION_FAMILIES)
            if role and role.group(1) in ("let", "observed"):
                return _morph_context(c)
            return family_items(step=False) + _morph_context(c)
        if ":" in c.stmt:
            if kw == "object":
                return type_items(c) + data_size_items() + space_items()
            return type_items(c)
        return []
    if kw in ("let", "export") and (kw == "export" or "=" in c.stmt):
        return _morph_context(c)
    return []

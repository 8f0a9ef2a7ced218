"""Checking the body of a `deduction` declaration (qvr-language.md section 10).

`check_deduction_body` checks the option block, the `atoms`/`binders` lines, the rules and
the lexicon of one deduction; the header types are resolved by the caller.  All `atoms`
and `binders` lines are collected first (10.2), so every later check sees the full set of
constructors whatever the order of the entries.

Decisions where the spec leaves room (each is also noted at the code that implements it):

* QVR704 / QVR705 on the same occurrence.  Both can apply only to a lower-case variable
  that occurs once.  At most one warning is reported per occurrence: QVR705 when the
  variable resembles a constructor or another variable (its message names the likely
  intended name), QVR704 otherwise.
* QVR705 resemblance.  The candidates are the constructors and the other variables of the
  rule; the name itself is excluded *before* lower-casing, so a variable `n` resembles the
  atom `N`.  Candidates equal ignoring case win, then `difflib` (cutoff 0.75) over the
  lower-cased candidates; failing both, the prefix relation is tried against the other
  variables only (the spec attaches it to variables), also in lower case.
* QVR104 for a rule name names no line (see `deduction_errors.duplicate_rule`); the first
  rule is attached as a related location.
* QVR205 for `depth`/`tolerance` is anchored at the key: section 12.4 gives the QVR205
  anchor as "value (key for options)", and 3.4 anchors its option case at the key too.
* QVR710 also covers a binder listed twice ("binder `Fn` is declared more than once").
* `parent=…` is reported as QVR900 on lexicon entries as well as on rules.
* A logical form is a NAME or an application; every other let-expression form, including
  a parenthesized one, is QVR900 and its inside is not checked further.  A malformed
  binder application whose first argument is not a NAME draws QVR504 only: its arguments
  are not checked, since they would mostly repeat the same root cause.
* A duplicate option key draws QVR202 and its value is ignored (the first one counts).
"""
from __future__ import annotations

from typing import Iterable, Optional, Union

from qvr.sema import deduction_errors as D
from qvr.sema.context import DeclContext, LocalInfo
from qvr.sema.families import SEMIRINGS
from qvr.sema.suggest import suggest
from qvr.syntax import ast
from qvr.text import Span

OPTION_KEYS = ("semiring", "start", "depth", "tolerance")
OUTSIDE_CORE_OPTIONS = ("max_iterations", "axioms", "signature", "encoder")
RULE_PRAGMAS = ("learnable", "bounded")
LEXICON_PRAGMAS = ("learnable",)
OUTSIDE_CORE_PRAGMAS = ("parent",)

_LF_CONSTRUCTS = {
    ast.Number: "a number",
    ast.StringLit: "a string literal",
    ast.EBinOp: "arithmetic",
    ast.ENeg: "arithmetic",
    ast.EMethod: "a method call",
    ast.EIndex: "indexing",
    ast.EList: "a list",
    ast.EParen: "a parenthesized expression",
    ast.ELambda: "a lambda",
    ast.EFactor: "a `factor` expression",
}


def check_deduction_body(ctx: DeclContext, decl: ast.DeductionDecl) -> dict:
    """Check options (semiring, start, depth, tolerance), atoms/binders, rules and lexicon.

    The header types (dom/cod) are resolved by the caller, not here.
    Returns {"semiring": str, "start": str|None, "atoms": tuple[str,...],
    "binders": tuple[str,...], "n_rules": int, "n_lexicon": int}; `semiring` is the
    default `LogProb` unless a valid one is given, `start` is None unless it is an atom.
    """
    return _DeductionChecker(ctx, decl).run()


def resembles(name: str, constructors: Iterable[str], variables: Iterable[str]) -> Optional[str]:
    """The name a singleton pattern variable resembles (QVR705), or None (see module doc)."""
    pool = sorted((set(constructors) | set(variables)) - {name})
    lowered: dict[str, str] = {}
    for c in pool:
        lowered.setdefault(c.lower(), c)
    low = name.lower()
    if low in lowered:
        return lowered[low]
    hit = suggest(low, lowered)
    if hit is not None:
        return lowered[hit]
    for v in sorted(set(variables) - {name}):
        lv = v.lower()
        if lv.startswith(low) or low.startswith(lv):
            return v
    return None


class _DeductionChecker:
    def __init__(self, ctx: DeclContext, decl: ast.DeductionDecl):
        self.ctx = ctx
        self.decl = decl
        self.owner = decl.name.text
        self.atoms: dict[str, Span] = {}  # name -> span of its first declaration
        self.binders: dict[str, Span] = {}
        self.semiring = "LogProb"
        self.start: Optional[str] = None

    # ------------------------------------------------------------ driver
    def run(self) -> dict:
        entries = self.decl.entries
        for e in entries:
            if isinstance(e, (ast.AtomsEntry, ast.BindersEntry)):
                self._declare(e)
        if self.decl.options is not None:
            self._options(self.decl.options)
        rule_names: dict[str, Span] = {}
        n_rules = n_lexicon = 0
        for e in entries:
            if isinstance(e, ast.RuleEntry):
                n_rules += 1
                self._rule(e, rule_names)
            elif isinstance(e, ast.LexiconBlock):
                for item in e.items:
                    n_lexicon += 1
                    self._lex_item(item)
            elif isinstance(e, ast.LexiconFile):
                self.ctx.report(D.lexicon_file(e.kw))
        return {
            "semiring": self.semiring,
            "start": self.start,
            "atoms": tuple(self.atoms),
            "binders": tuple(self.binders),
            "n_rules": n_rules,
            "n_lexicon": n_lexicon,
        }

    @property
    def constructors(self) -> set[str]:
        return set(self.atoms) | set(self.binders)

    def _info(self, name: str, kind: str, detail: str = "") -> LocalInfo:
        return LocalInfo(name, kind, "", detail=detail, owner=self.owner)

    # ------------------------------------------------------------ atoms and binders
    def _declare(self, entry: Union[ast.AtomsEntry, ast.BindersEntry]) -> None:
        kind = "atom" if isinstance(entry, ast.AtomsEntry) else "binder"
        table = self.atoms if kind == "atom" else self.binders
        for n in entry.names:
            first = table.get(n.text)
            if first is None:
                table[n.text] = n.span
                self.ctx.fact(n.span, "local", self._info(n.text, kind))
            else:
                self.ctx.report(D.duplicate_atom(n.span, n.text, kind))
                self.ctx.fact(n.span, "localref", first)

    def _constructor_def(self, name: str, binder_first: bool = False) -> Optional[Span]:
        order = (self.binders, self.atoms) if binder_first else (self.atoms, self.binders)
        for table in order:
            if name in table:
                return table[name]
        return None

    # ------------------------------------------------------------ options
    def _options(self, block: ast.OptionBlock) -> None:
        seen: set[str] = set()
        for entry in block.entries:
            key = entry.key
            if key.text in seen:
                self.ctx.report(D.duplicate_option(key.span, key.text))
                continue
            seen.add(key.text)
            if key.text in OUTSIDE_CORE_OPTIONS:
                self.ctx.report(D.option_outside_core(key.span, key.text))
                continue
            if key.text not in OPTION_KEYS:
                self.ctx.report(D.unknown_option(key.span, key.text, suggest(key.text, OPTION_KEYS)))
                continue
            self.ctx.fact(key.span, "option", ("deduction", key.text))
            value = entry.value
            if isinstance(value, ast.OVCall):
                self.ctx.report(D.option_value_outside_core(value.span, value.name.text))
                continue
            getattr(self, f"_opt_{key.text}")(key, value)

    def _opt_semiring(self, key: ast.Name, value) -> None:
        if not isinstance(value, ast.OVName):
            self.ctx.report(D.option_wrong_shape(key.span, key.text, "a name"))
        elif value.text not in SEMIRINGS:
            self.ctx.report(D.unknown_semiring(value.span, value.text, suggest(value.text, SEMIRINGS)))
        else:
            self.semiring = value.text

    def _opt_start(self, key: ast.Name, value) -> None:
        if not isinstance(value, ast.OVName):
            self.ctx.report(D.option_wrong_shape(key.span, key.text, "a name"))
        elif value.text not in self.atoms:
            self.ctx.report(D.start_not_atom(value.span, value.text, suggest(value.text, self.atoms)))
        else:
            self.start = value.text
            self.ctx.fact(value.span, "localref", self.atoms[value.text])

    def _opt_depth(self, key: ast.Name, value) -> None:
        if not (isinstance(value, ast.Number) and value.is_int):
            self.ctx.report(D.option_wrong_shape(key.span, key.text, "an integer"))
        elif value.value < 0:
            self.ctx.report(D.option_below(key.span, key.text, "0", value.text))

    def _opt_tolerance(self, key: ast.Name, value) -> None:
        if not isinstance(value, ast.Number):
            self.ctx.report(D.option_wrong_shape(key.span, key.text, "a number"))
        elif value.value < 0:
            self.ctx.report(D.option_below(key.span, key.text, "0", value.text))

    # ------------------------------------------------------------ pragmas
    def _pragma(self, pragma: Optional[ast.Pragma], allowed: tuple[str, ...], on_lexicon: bool) -> None:
        if pragma is None:
            return
        seen: set[str] = set()
        for entry in pragma.entries:
            key = entry.key
            if key.text in seen:
                self.ctx.report(D.duplicate_pragma(key.span, key.text))
                continue
            seen.add(key.text)
            if key.text in OUTSIDE_CORE_PRAGMAS:
                self.ctx.report(D.pragma_outside_core(key.span, key.text))
            elif key.text in allowed:
                if entry.value is not None:
                    self.ctx.report(D.pragma_flag_value(key.span, key.text))
            elif on_lexicon and key.text in RULE_PRAGMAS:
                self.ctx.report(D.pragma_not_for_lexicon(key.span, key.text))
            else:
                self.ctx.report(D.unknown_pragma(key.span, key.text, suggest(key.text, allowed)))
        if not on_lexicon and "bounded" in seen and "learnable" not in seen:
            first = next(e for e in pragma.entries if e.key.text == "bounded")
            self.ctx.report(D.bounded_without_learnable(first.span))

    # ------------------------------------------------------------ rules
    def _rule(self, rule: ast.RuleEntry, names: dict[str, Span]) -> None:
        rname = rule.name
        if rname.text in names:
            self.ctx.report(D.duplicate_rule(rname.span, rname.text, names[rname.text]))
        else:
            names[rname.text] = rname.span
        self.ctx.fact(rname.span, "local", self._info(rname.text, "rule"))

        occurrences: dict[str, list[Span]] = {}  # variable -> spans, in source order
        for p in (*rule.premises, rule.conclusion):
            self._pattern(p, occurrences)

        constructors = self.constructors
        for var, spans in occurrences.items():
            first = spans[0]
            self.ctx.fact(first, "local", self._info(var, "patvar", rname.text))
            for s in spans[1:]:
                self.ctx.fact(s, "localref", first)
            # At most one warning per occurrence: QVR705 wins over QVR704 (module doc).
            like = resembles(var, constructors, occurrences) if len(spans) == 1 else None
            if like is not None:
                self.ctx.report(D.suspicious_singleton(first, var, rname.text, like))
            elif var[:1].islower():
                self.ctx.report(D.lower_case_variable(first, var))
        self._pragma(rule.pragma, RULE_PRAGMAS, on_lexicon=False)

    def _pattern(self, p: ast.Pattern, occurrences: dict[str, list[Span]]) -> None:
        head = p.head
        if p.args is not None:
            where = self._constructor_def(head.text)
            if where is None:
                self.ctx.report(D.undeclared_constructor(
                    head.span, head.text, suggest(head.text, self.constructors)))
            else:
                self.ctx.fact(head.span, "localref", where)
            for a in p.args:
                self._pattern(a, occurrences)
            return
        where = self._constructor_def(head.text)
        if where is not None:  # a constant
            self.ctx.fact(head.span, "localref", where)
        else:  # a pattern variable
            occurrences.setdefault(head.text, []).append(head.span)

    # ------------------------------------------------------------ lexicon
    def _lex_item(self, item: ast.LexItem) -> None:
        cat = item.category
        if isinstance(cat, ast.CatStar):
            self.ctx.report(D.category_star(cat.span))
        elif isinstance(cat, ast.CatSet):
            self.ctx.report(D.category_set(Span(cat.span.start, cat.span.start + 1)))
        else:
            self._category(cat)
        self._lf(item.lf, {})
        self._pragma(item.pragma, LEXICON_PRAGMAS, on_lexicon=True)

    def _category(self, p: ast.Pattern) -> None:
        name = p.head
        if name.text in self.atoms:
            self.ctx.fact(name.span, "localref", self.atoms[name.text])
        else:
            self.ctx.report(D.non_atom_in_category(name.span, name.text, suggest(name.text, self.atoms)))
        for a in p.args or ():
            self._category(a)

    def _lf(self, e, scope: dict[str, Span]) -> None:
        """Check a logical form; `scope` maps bound variables in scope to their binding span."""
        if isinstance(e, ast.EName):
            n = e.name
            if n.text in scope:
                self.ctx.fact(n.span, "localref", scope[n.text])
            elif n.text in self.atoms:
                self.ctx.fact(n.span, "localref", self.atoms[n.text])
            else:
                s = suggest(n.text, set(self.atoms) | set(scope))
                self.ctx.report(D.unresolved_lf_name(n.span, n.text, s))
            return
        if isinstance(e, ast.ECall):
            self._lf_call(e, scope)
            return
        construct = _LF_CONSTRUCTS.get(type(e), "this expression")
        if isinstance(e, (ast.EBinOp, ast.ENeg)):
            span = e.op_span if isinstance(e, ast.EBinOp) else e.op
        else:
            span = e.span
        self.ctx.report(D.lf_outside_core(span, construct))

    def _lf_call(self, e: ast.ECall, scope: dict[str, Span]) -> None:
        head = e.callee
        # An application head is never a variable: constructors resolve first.
        if head.text in self.binders:
            self.ctx.fact(head.span, "localref", self.binders[head.text])
            first = e.args[0] if e.args else None
            if not isinstance(first, ast.EName):
                self.ctx.report(D.malformed_binder(head.span, head.text))
                if first is not None:
                    return  # the arguments of a malformed binder are not checked (module doc)
                args, inner = (), scope
            else:
                var = first.name
                self.ctx.fact(var.span, "local", self._info(var.text, "bound", head.text))
                inner = {**scope, var.text: var.span}
                args = e.args[1:]
                if not args:
                    self.ctx.report(D.malformed_binder(head.span, head.text))
        elif head.text in self.atoms:
            self.ctx.fact(head.span, "localref", self.atoms[head.text])
            args, inner = e.args, scope
        elif head.text in scope:
            self.ctx.report(D.bound_variable_applied(head.span, head.text))
            args, inner = e.args, scope
        else:
            self.ctx.report(D.unresolved_lf_name(head.span, head.text, suggest(head.text, self.constructors)))
            args, inner = e.args, scope
        for a in args:
            self._lf(a, inner)

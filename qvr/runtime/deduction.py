"""Weighted deduction systems (runtime spec 6.8): compiled `deduction` blocks and charts.

A `DeductionSystem` holds the atoms, rules, lexicon and options of one block.  Calling it on
a token list (or on a list of `(item, weight)` axioms) runs agenda-based semi-naive
forward chaining to a fixed point and returns a `ChartView`; `goal_weight()` is the
⊕-sum over the goal items (`log Z` under `LogProb`).

Items are nested tuples: an atom `S` is `("atom", "S")`, an application `Fwd(X, Y)` is
`("Fwd", X, Y)`, a chart span is `("span", i, j, category[, lf])`.  Learnable lexicon
weights are parameters `_axiom_module.lex_weight_<i>`; learnable rule weights are created
lazily, one per distinct binding of the rule's variables, in `_rule_module`.

Decisions: a deduction whose atoms include `span` turns each lexicon entry for token `i`
into `("span", i, i+1, category[, lf])`; one without `span` uses the category itself as the
axiom.  Goal items are all chart items whose category is the start atom, whatever their
span (spec 6.8).  Under the `Counting` semiring a log-weight θ enters as `exp(θ)`.
This module does not know programs; `parse`/`compose` in let-expressions call it.
"""
from __future__ import annotations

from collections import deque

import torch
import torch.nn.functional as F
from torch import nn

from qvr.syntax import ast as A

MAX_POPS = 100_000
_NEG_INF = float("-inf")


class Semiring:
    def __init__(self, name):
        self.name = name

    def zero(self, like):
        return torch.zeros((), dtype=like.dtype, device=like.device) if self.name == "Counting" \
            else torch.full((), _NEG_INF, dtype=like.dtype, device=like.device)

    def one(self, like):
        return torch.ones((), dtype=like.dtype, device=like.device) if self.name == "Counting" \
            else torch.zeros((), dtype=like.dtype, device=like.device)

    def plus(self, a, b):
        if self.name == "LogProb":
            return torch.logaddexp(a, b)
        if self.name == "Counting":
            return a + b
        return torch.maximum(a, b)

    def times(self, a, b):
        return a * b if self.name == "Counting" else a + b

    def lift(self, theta):
        """A log-weight parameter as a semiring weight."""
        return torch.exp(theta) if self.name == "Counting" else theta

    def total(self, ws):
        if self.name == "LogProb":
            return torch.logsumexp(torch.stack(ws), 0)
        if self.name == "Counting":
            return torch.stack(ws).sum(0)
        return torch.stack(ws).max(0).values


# -------------------------------------------------------------- patterns and terms

class Var:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _compile_pattern(p: A.Pattern, constructors) -> object:
    head = p.head.text
    if p.args is None:
        return ("atom", head) if head in constructors else Var(head)
    return (head,) + tuple(_compile_pattern(a, constructors) for a in p.args)


def _compile_term(p, bound=()) -> object:
    """A lexicon category or logical form (no pattern variables)."""
    if isinstance(p, A.Pattern):
        head = p.head.text
        if p.args is None:
            return ("var", head) if head in bound else ("atom", head)
        return (head,) + tuple(_compile_term(a, bound) for a in p.args)
    if isinstance(p, A.EName):
        return ("var", p.name.text) if p.name.text in bound else ("atom", p.name.text)
    if isinstance(p, A.ECall):
        return (p.callee.text,) + tuple(_compile_term(a, bound) for a in p.args)
    if isinstance(p, A.EParen):
        return _compile_term(p.inner, bound)
    raise NotImplementedError(f"logical form {type(p).__name__} is outside the core")


def _lf_binders(lf, binders) -> set:
    """Names bound by binder applications `b(x, ...)` anywhere in a logical form."""
    out = set()
    if isinstance(lf, A.ECall):
        if lf.callee.text in binders and lf.args and isinstance(lf.args[0], A.EName):
            out.add(lf.args[0].name.text)
        for a in lf.args:
            out |= _lf_binders(a, binders)
    elif isinstance(lf, A.EParen):
        out |= _lf_binders(lf.inner, binders)
    return out


def _match(pat, item, env):
    if isinstance(pat, Var):
        if pat.name in env:
            return env if env[pat.name] == item else None
        env = dict(env)
        env[pat.name] = item
        return env
    if isinstance(pat, tuple):
        if not isinstance(item, tuple) or len(item) != len(pat) or item[0] != pat[0]:
            return None
        if pat[0] == "atom":
            return env if item == pat else None
        for p, i in zip(pat[1:], item[1:]):
            env = _match(p, i, env)
            if env is None:
                return None
        return env
    return env if pat == item else None


def _subst(pat, env):
    if isinstance(pat, Var):
        return env.get(pat.name, ("var", pat.name))
    if isinstance(pat, tuple):
        if pat[0] == "atom":
            return pat
        return (pat[0],) + tuple(_subst(p, env) for p in pat[1:])
    return pat


def _depth(term) -> int:
    if not isinstance(term, tuple) or term[0] in ("atom", "var"):
        return 0
    return 1 + max((_depth(a) for a in term[1:]), default=0)


class Rule:
    def __init__(self, name, premises, conclusion, learnable, bounded):
        self.name = name
        self.premises = premises
        self.conclusion = conclusion
        self.learnable = learnable
        self.bounded = bounded
        self.variables = sorted({v for p in premises for v in _vars(p)} | set(_vars(conclusion)))


def _vars(p):
    if isinstance(p, Var):
        yield p.name
    elif isinstance(p, tuple) and p and p[0] != "atom":
        for a in p[1:]:
            yield from _vars(a)


# -------------------------------------------------------------- systems

class _ParamHolder(nn.Module):
    pass


class DeductionSystem(nn.Module):
    """One `deduction` block; call it on tokens or axioms to get a `ChartView`."""

    def __init__(self, name, atoms, binders, rules, lexicon, *, semiring="LogProb", start=None,
                 depth=None, tolerance=0.0):
        super().__init__()
        self.name = name
        self.atoms = tuple(atoms)
        self.binders = tuple(binders)
        self.rules = list(rules)
        self.semiring = Semiring(semiring)
        self.start = start
        self.depth = depth
        self.tolerance = float(tolerance or 0.0)
        self.uses_span = "span" in self.atoms
        self.uses_lf = any(isinstance(p, tuple) and p[0] == "span" and len(p) == 5
                           for r in self.rules for p in (*r.premises, r.conclusion))
        self.lexicon = []  # (word, category, lf, param name or None)
        self._axiom_module = _ParamHolder()
        self._rule_module = _ParamHolder()
        self._rule_keys: dict = {}
        for i, (word, cat, lf, learnable) in enumerate(lexicon):
            pname = None
            if learnable:
                pname = f"lex_weight_{i}"
                self._axiom_module.register_parameter(pname, nn.Parameter(torch.zeros(())))
            self.lexicon.append((word, cat, lf, pname))

    # -- construction from the AST
    @classmethod
    def from_decl(cls, d: A.DeductionDecl, options: dict) -> "DeductionSystem":
        atoms, binders, rules, lexicon = [], [], [], []
        for e in d.entries:
            if isinstance(e, A.AtomsEntry):
                atoms += [n.text for n in e.names if n.text not in atoms]
            elif isinstance(e, A.BindersEntry):
                binders += [n.text for n in e.names if n.text not in binders]
        constructors = set(atoms) | set(binders)
        for e in d.entries:
            if isinstance(e, A.RuleEntry):
                flags = {p.key.text for p in e.pragma.entries} if e.pragma else set()
                rules.append(Rule(e.name.text,
                                  [_compile_pattern(p, constructors) for p in e.premises],
                                  _compile_pattern(e.conclusion, constructors),
                                  "learnable" in flags, "bounded" in flags and "learnable" in flags))
            elif isinstance(e, A.LexiconBlock):
                for it in e.items:
                    flags = {p.key.text for p in it.pragma.entries} if it.pragma else set()
                    bound = _lf_binders(it.lf, set(binders))
                    lexicon.append((it.word.value, _compile_term(it.category),
                                    _compile_term(it.lf, bound), "learnable" in flags))
        return cls(d.name.text, atoms, binders, rules, lexicon,
                   semiring=options.get("semiring", "LogProb"), start=options.get("start"),
                   depth=options.get("depth"), tolerance=options.get("tolerance", 0.0))

    # -- weights
    def _like(self):
        for p in self.parameters():
            return p
        return torch.zeros(())

    def _lex_weight(self, pname):
        like = self._like()
        if pname is None:
            return self.semiring.one(like)
        return self.semiring.lift(getattr(self._axiom_module, pname))

    def _rule_weight(self, rule: Rule, env):
        like = self._like()
        if not rule.learnable:
            return self.semiring.one(like)
        key = (rule.name, tuple((v, env.get(v)) for v in rule.variables))
        pname = self._rule_keys.get(key)
        if pname is None:
            pname = f"{rule.name}__{sum(1 for k in self._rule_keys if k[0] == rule.name)}"
            self._rule_keys[key] = pname
            self._rule_module.register_parameter(
                pname, nn.Parameter(torch.zeros((), dtype=like.dtype, device=like.device)))
        theta = getattr(self._rule_module, pname)
        if rule.bounded:
            theta = -F.softplus(theta)
        return self.semiring.lift(theta)

    # -- axioms
    def axioms(self, inp) -> list:
        if isinstance(inp, str):
            inp = inp.split()
        inp = list(inp)
        if inp and all(isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], tuple)
                       for a in inp):
            return [(item, torch.as_tensor(w)) for item, w in inp]
        out = []
        for i, tok in enumerate(inp):
            tok = str(tok)
            for word, cat, lf, pname in self.lexicon:
                if word != tok:
                    continue
                if self.uses_span:
                    item = ("span", i, i + 1, cat, lf) if self.uses_lf else ("span", i, i + 1, cat)
                else:
                    item = cat
                out.append((item, self._lex_weight(pname)))
        return out

    def __call__(self, inp) -> "ChartView":
        return self.run(self.axioms(inp))

    def forward(self, inp):  # pragma: no cover - nn.Module protocol
        return self.run(self.axioms(inp))

    def compose(self, other: "DeductionSystem") -> "ComposedDeduction":
        return ComposedDeduction(self, other)

    # -- evaluation
    def _category(self, item):
        if isinstance(item, tuple) and item and item[0] == "span" and len(item) >= 4:
            return item[3]
        return item

    def is_goal(self, item) -> bool:
        if self.start is None:
            return True
        cat = self._category(item)
        return cat == ("atom", self.start) or (isinstance(cat, tuple) and cat[0] == self.start)

    def run(self, axioms) -> "ChartView":
        sr = self.semiring
        chart: dict = {}
        by_head: dict = {}
        agenda = deque(axioms)
        pops = 0
        while agenda:
            pops += 1
            if pops > MAX_POPS:
                raise RuntimeError(f"deduction `{self.name}` did not converge within "
                                   f"{MAX_POPS} agenda pops")
            item, w = agenda.popleft()
            old = chart.get(item)
            if old is None:
                chart[item] = w
                by_head.setdefault(item[0] if isinstance(item, tuple) else item, []).append(item)
            else:
                new = sr.plus(old, w)
                if self._unchanged(old, new):
                    continue
                chart[item] = new
            for rule in self.rules:
                for pos, prem in enumerate(rule.premises):
                    env = _match(prem, item, {})
                    if env is None:
                        continue
                    others = [p for i, p in enumerate(rule.premises) if i != pos]
                    for env2, ws in self._join(others, env, chart, by_head):
                        conc = _subst(rule.conclusion, env2)
                        if self.depth is not None and _depth(self._category(conc)) > self.depth:
                            continue
                        weight = w
                        for x in ws:
                            weight = sr.times(weight, x)
                        weight = sr.times(weight, self._rule_weight(rule, env2))
                        agenda.append((conc, weight))
        return ChartView(self, chart)

    def _unchanged(self, old, new) -> bool:
        if bool(new == old):
            return True
        if self.tolerance > 0 and bool(torch.isfinite(old)) and bool(torch.isfinite(new)):
            return float((new - old).abs()) <= self.tolerance
        return False

    def _join(self, premises, env, chart, by_head):
        if not premises:
            yield env, []
            return
        first, rest = premises[0], premises[1:]
        head = first[0] if isinstance(first, tuple) else None
        candidates = by_head.get(head, []) if head is not None else list(chart)
        for item in list(candidates):
            env2 = _match(first, item, env)
            if env2 is None:
                continue
            for env3, ws in self._join(rest, env2, chart, by_head):
                yield env3, [chart[item]] + ws


class ComposedDeduction(DeductionSystem):
    """`compose(d1, d2)`: d2's system whose axioms also include d1's goal items."""

    def __init__(self, first: DeductionSystem, second: DeductionSystem):
        nn.Module.__init__(self)
        self.first = first
        self.second = second

    def __getattr__(self, name):
        if name in ("first", "second", "_modules", "_parameters", "_buffers"):
            return nn.Module.__getattr__(self, name)
        return getattr(self.second, name)

    def axioms(self, inp) -> list:
        chart = self.first(inp)
        return self.second.axioms(inp) + [(it, chart.chart[it]) for it in chart.goal_items]

    def run(self, axioms):
        view = self.second.run(axioms)
        return ChartView(self.second, view.chart)

    def __call__(self, inp):
        return self.run(self.axioms(inp))


class ChartView:
    """The result of running a deduction system on one input."""

    def __init__(self, system: DeductionSystem, chart: dict):
        self.system = system
        self.chart = chart

    @property
    def goal_items(self) -> list:
        return [it for it in self.chart if self.system.is_goal(it)]

    def goal_weight(self) -> torch.Tensor:
        ws = [self.chart[it] for it in self.goal_items]
        if not ws:
            return self.system.semiring.zero(self.system._like())
        return self.system.semiring.total(ws)

    def try_weight(self, item, default=None):
        if item in self.chart:
            return self.chart[item]
        return default if default is not None else self.system.semiring.zero(self.system._like())

    def weight(self, item):
        return self.chart[item]

    def enumerate(self, head):
        return [(it, w) for it, w in self.chart.items() if isinstance(it, tuple) and it[0] == head]

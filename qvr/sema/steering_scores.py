"""Score steps of a steering program (docs/extensions.md E10, "Potentials in the program";
issue 40): constraints and soft potentials written in QVR.

A *steering program* samples a pretrained LM and scores the draw::

    program steer : Token -> Token
        sample next <- lm
        score no_cat = forbid_words(next, "cat", "dog")
        score fewer_e = -0.5 * count_letters(next, "e")
        return next

SMC proposes with the `sample` step; at every step the sum of the score steps, evaluated on
each child (the particle extended by `next`), is the child's log potential.  The *text
functions* (`TEXT_FUNCTIONS`) are extension builtins valid only there: the constraints
return 0 or -inf (the text potentials of `qvr.smc.text_potentials`, the CLI's `--forbid`,
`--require`, ...), the soft ones a number per token read from a table over the vocabulary.

This module is the checker's side (`SteeringChecks`, used by `ProgramChecker` when a
program samples a pretrained morphism and has score steps: QVR109, QVR416, QVR863-QVR868,
QVR900) and the data the runtime reads (`program_scores`: plain AST and strings, no torch).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from qvr.sema import errors as E
from qvr.sema import pretrained_errors as PE
from qvr.sema.symbols import MorphismSym
from qvr.sema.suggest import suggest
from qvr.syntax import ast as A
from qvr.syntax.errors import outside_core


@dataclass(frozen=True)
class TextFunction:
    name: str
    params: tuple[tuple[str, str], ...]  # (name, kind): token | string | strings | int
    indicator: bool  # 0 or -inf (a constraint), else a number per token
    meaning: str

    @property
    def signature(self) -> str:
        def one(p, k):
            return f"{p}..." if k == "strings" else p
        return f"{self.name}({', '.join(one(p, k) for p, k in self.params)})"

    @property
    def kinds(self) -> str:
        return "constraint: 0 or -inf" if self.indicator else "number per token"


TEXT_FUNCTIONS: dict[str, TextFunction] = {f.name: f for f in [
    TextFunction("forbid_words", (("token", "token"), ("phrase", "strings")), True,
                 "-inf once the text holds one of the phrases as whole words (--forbid)"),
    TextFunction("require_word", (("token", "token"), ("word", "string"), ("within", "int")),
                 True, "-inf unless the word is among the first `within` words (--require "
                       "WORD@N)"),
    TextFunction("forbid_letters", (("token", "token"), ("letters", "string")), True,
                 "-inf once the text holds one of the letters, either case (--forbid-letters)"),
    TextFunction("word_budget", (("token", "token"), ("max_letters", "int")), True,
                 "-inf once a word is longer than `max_letters` characters (--max-word-len)"),
    TextFunction("template", (("token", "token"), ("pattern", "string")), True,
                 "-inf unless the text follows the pattern word by word, `_` a free word "
                 "(--template)"),
    TextFunction("count_letters", (("token", "token"), ("letters", "string")), False,
                 "how many of the letters (either case) the new token's text holds"),
    TextFunction("token_length", (("token", "token"),), False,
                 "the number of characters of the new token's text"),
]}

#: the core let-expression functions a steering score step may use (qvr/runtime/letexpr.py)
SCORE_BUILTINS = ("exp", "log", "sqrt", "sigmoid")
_WORD = re.compile(r"\w+|[^\w\s]+")


def call_key(e: A.ECall) -> tuple[int, int]:
    """The key of one text call in its declaration (the runtime's `text_value(key)`)."""
    return (e.span.start, e.span.end)


# ---------------------------------------------------------------- the data for the runtime

@dataclass(frozen=True)
class TextCall:
    key: tuple[int, int]
    function: str
    args: tuple  # the arguments after the token: str or int


@dataclass(frozen=True)
class SteerScore:
    name: str
    line: int
    expr: A.Expr  # the right-hand side (text calls found by `call_key`)
    calls: tuple[TextCall, ...]


def text_calls(e) -> list[TextCall]:
    """Every text call of a checked score expression, in order."""
    out: list[TextCall] = []

    def walk(x):
        if isinstance(x, A.ECall):
            if x.callee.text in TEXT_FUNCTIONS:
                args = tuple(a.value if isinstance(a, A.StringLit) else int(a.value)
                             for a in x.args[1:])
                out.append(TextCall(call_key(x), x.callee.text, args))
                return
            for a in x.args:
                walk(a)
        elif isinstance(x, A.EParen):
            walk(x.inner)
        elif isinstance(x, A.ENeg):
            walk(x.operand)
        elif isinstance(x, A.EBinOp):
            walk(x.left)
            walk(x.right)
    walk(e)
    return out


def program_scores(decl: A.ProgramDecl, line_of) -> tuple[SteerScore, ...]:
    """The score steps of a (checked) steering program; `line_of(offset)`: the line of a
    span offset of the declaration."""
    return tuple(SteerScore(s.bind.text, line_of(s.span.start), s.rhs, tuple(text_calls(s.rhs)))
                 for s in decl.body if isinstance(s, A.ScoreStep))


# ---------------------------------------------------------------- the checker

def steering_sample(ctx, d: A.ProgramDecl) -> Optional[A.SampleStep]:
    """The top-level step `sample NAME <- LM` (LM a pretrained morphism) of a program that
    also has score steps: a steering program; None otherwise."""
    if not any(isinstance(s, A.ScoreStep) for s in d.body):
        return None
    for s in d.body:
        if isinstance(s, A.SampleStep) and isinstance(s.bind, A.Name):
            sym = ctx.value(s.target.name.text)
            if isinstance(sym, MorphismSym) and sym.role == "pretrained":
                return s
    return None


def _what(step) -> str:
    return {A.LetStep: "a `let` step", A.ObserveStep: "an `observe` step",
            A.MarginalizeStep: "a `marginalize` block", A.SampleStep: "a second `sample` step",
            A.DataStep: "a `data` step"}.get(type(step), "this step")


class SteeringChecks:
    """Mixed into `ProgramChecker`: `self.steering` is the steering sample step (or None)."""

    steering: Optional[A.SampleStep] = None

    def _steering_shape(self) -> str:
        s = self.steering
        return (f"a steering program has `sample {s.bind.text} <- {s.target.name.text}`, "
                f"`score` steps and `return {s.bind.text}`")

    def steering_header(self, d: A.ProgramDecl) -> None:
        if d.params is not None:
            self.ctx.report(PE.steering_step(d.params.span, f"{self._steering_shape()}: it "
                                                            f"takes no parameters"))

    def steering_step(self, step) -> None:
        """QVR864 for what SMC cannot run in a steering program (the step is still checked
        as usual afterwards)."""
        ctx, s = self.ctx, self.steering
        if step is s:
            if step.index is not None:
                ctx.report(PE.steering_step(step.index.span, f"{self._steering_shape()}: the "
                                                             f"draw takes no index"))
            if step.target.args is not None:
                ctx.report(PE.steering_step(step.target.span, f"{self._steering_shape()}: "
                                                              f"`{s.target.name.text}` takes "
                                                              f"no arguments here"))
            if step.options is not None:
                ctx.report(PE.steering_step(step.options.span, f"{self._steering_shape()}: the "
                                                               f"draw takes no options"))
            return
        if isinstance(step, A.ScoreStep):
            if step.span.start < s.span.start:
                ctx.report(PE.steering_step(step.kw, f"{self._steering_shape()}: a score step "
                                                     f"comes after the `sample` step"))
            elif step.index is not None:
                ctx.report(PE.steering_step(step.index.span, f"{self._steering_shape()}: a "
                                                             f"score step takes no index"))
            return
        if isinstance(step, A.ReturnStep):
            v = step.value
            if not (isinstance(v, A.Name) and v.text == s.bind.text):
                ctx.report(PE.steering_step(v.span, f"{self._steering_shape()}: it returns "
                                                    f"the sampled token"))
            return
        ctx.report(PE.steering_step(step.kw, f"{self._steering_shape()}: SMC cannot run "
                                             f"{_what(step)} in it"))

    def steering_score(self, step: A.ScoreStep) -> None:
        self.effects.add("Score")
        if step.span.start > self.steering.span.start:
            self._steer_expr(step.rhs)
        self.bind_local(step.bind, "score", None, "numeric",
                        "numeric", detail="score step · a log potential of SMC steering")

    # -- the expression: numbers, + - * /, unary minus, parentheses, exp/log/sqrt/sigmoid,
    #    text functions; returns whether it holds a constraint (0 or -inf)
    def _steer_expr(self, e) -> Optional[str]:
        ctx = self.ctx
        if isinstance(e, A.Number):
            return None
        if isinstance(e, A.EParen):
            return self._steer_expr(e.inner)
        if isinstance(e, A.ENeg):
            ind = self._steer_expr(e.operand)
            if ind:
                ctx.report(PE.indicator_sign(e.op, ind, "its negation"))
            return None
        if isinstance(e, A.EBinOp):
            if e.op not in ("+", "-", "*", "/"):
                ctx.report(PE.score_reads(e.op_span, f"`{e.op}` is not evaluated in a steering "
                                                     f"score step: use numbers, + - * /, "
                                                     f"{', '.join(SCORE_BUILTINS)} and the text "
                                                     f"functions"))
                return None
            left = self._steer_expr(e.left)
            right = self._steer_expr(e.right)
            if e.op == "+":
                return left or right
            if e.op == "-":
                if right:
                    ctx.report(PE.indicator_sign(e.op_span, right, "subtracting it"))
                return left
            if e.op == "/":
                if right:
                    ctx.report(PE.indicator_sign(e.op_span, right, "dividing by it"))
                if left and not _positive(e.right):
                    ctx.report(PE.indicator_sign(e.op_span, left, "dividing it by a value "
                                                              "that is not a positive number"))
                return left
            for ind, other in ((left, e.right), (right, e.left)):  # "*"
                if ind and not _positive(other):
                    ctx.report(PE.indicator_sign(e.op_span, ind, "a factor that is not a "
                                                                 "positive number"))
            return left or right
        if isinstance(e, A.ECall):
            return self._steer_call(e)
        if isinstance(e, A.EName):
            self._steer_name(e.name)
            return None
        if isinstance(e, A.StringLit):
            ctx.report(outside_core(e.span, "string literals in let-expressions", plural=True))
            return None
        ctx.report(PE.score_reads(e.span, f"`{ctx.snippet(e.span)}` is not evaluated in a "
                                          f"steering score step: use numbers, + - * /, "
                                          f"{', '.join(SCORE_BUILTINS)} and the text functions"))
        return None

    def _steer_name(self, n: A.Name) -> None:
        ctx, token = self.ctx, self.steering.bind.text
        local = self.use_local_quiet(n)
        if n.text == token and local is not None:
            msg = (f"`{token}` is read by the text functions, as their first argument "
                   f"(`token_length({token})`, `count_letters({token}, \"e\")`), not as a number")
        elif local is not None:
            msg = (f"`{n.text}` is a local of the program: SMC evaluates a steering score "
                   f"step on each new token and supplies only `{token}`")
        else:
            ctx.fact(n.span, "host", n.text)
            msg = (f"`{n.text}` would be host data, which SMC steering does not supply: a "
                   f"steering score step reads text functions of `{token}` and numbers")
        ctx.report(PE.score_reads(n.span, msg))

    def _steer_call(self, e: A.ECall) -> Optional[str]:
        ctx, name = self.ctx, e.callee.text
        fn = TEXT_FUNCTIONS.get(name)
        if fn is None:
            if name in SCORE_BUILTINS:
                ctx.fact(e.callee.span, "builtin", name)
                if len(e.args) != 1:
                    ctx.report(E.builtin_arity(e.callee.span, name, 1, len(e.args)))
                for a in e.args:
                    ind = self._steer_expr(a)
                    if ind:
                        ctx.report(PE.indicator_sign(e.callee.span, ind, f"`{name}` of it"))
                return None
            from qvr.sema.families import BUILTINS, OUTSIDE_CORE_BUILTINS
            if name in BUILTINS or name in OUTSIDE_CORE_BUILTINS:
                ctx.report(PE.score_reads(e.callee.span, f"`{name}` is not evaluated in a "
                                                         f"steering score step: use numbers, "
                                                         f"+ - * /, {', '.join(SCORE_BUILTINS)} "
                                                         f"and the text functions"))
            else:
                pool = (*TEXT_FUNCTIONS, *SCORE_BUILTINS)
                ctx.report(E.unknown_function(e.callee.span, name, suggest(name, pool)))
            return None
        ctx.fact(e.callee.span, "builtin", name)
        variadic = fn.params[-1][1] == "strings"
        n = len(fn.params)
        if (len(e.args) < n) if variadic else (len(e.args) != n):
            shown = ", ".join(p + ("..." if k == "strings" else "") for p, k in fn.params)
            ctx.report(error_arity(e.callee.span, name, n, len(e.args), variadic, shown))
            if not e.args:
                return name if fn.indicator else None
        token = self.steering.bind.text
        first = e.args[0] if e.args else None
        if first is not None:
            if isinstance(first, A.EName) and first.name.text == token \
                    and self.visible(token) is not None:
                self.use_local_quiet(first.name)
            else:
                if isinstance(first, A.EName):
                    self.use_local_quiet(first.name)
                ctx.report(PE.not_the_token(first.span, name, token, ctx.snippet(first.span)))
        kinds = [k for _p, k in fn.params[1:]]
        params = [p for p, _k in fn.params[1:]]
        for i, a in enumerate(e.args[1:]):
            if i >= len(kinds) and not variadic:
                break
            kind = kinds[min(i, len(kinds) - 1)]
            param = params[min(i, len(params) - 1)]
            self._text_arg(a, name, param, kind)
        return name if fn.indicator else None

    def _text_arg(self, a, name: str, param: str, kind: str) -> None:
        ctx = self.ctx
        if kind in ("string", "strings"):
            if not isinstance(a, A.StringLit):
                ctx.report(PE.text_argument(a.span, f"`{param}` of `{name}` must be a string, "
                                                    f"got `{ctx.snippet(a.span)}`"))
            elif name in ("forbid_words", "require_word", "template") and \
                    not _WORD.search(a.value):
                ctx.report(PE.text_argument(a.span, f"`{param}` of `{name}` must have at least "
                                                    f"one word, got {a.text}"))
            elif not a.value:
                ctx.report(PE.text_argument(a.span, f"`{param}` of `{name}` must not be empty"))
            elif name == "require_word" and len(_WORD.findall(a.value)) != 1:
                ctx.report(PE.text_argument(a.span, f"`{param}` of `require_word` is one word, "
                                                    f"got {a.text}"))
            return
        if not (isinstance(a, A.Number) and a.is_int and a.value >= 1):
            ctx.report(PE.text_argument(a.span, f"`{param}` of `{name}` must be a positive "
                                                f"integer, got `{ctx.snippet(a.span)}`"))


def error_arity(span, name: str, n: int, got: int, variadic: bool, shown: str):
    from qvr.diagnostics import error
    least = "at least " if variadic else ""
    return error("QVR416", span, f"`{name}` expects {least}{n} argument{'s' if n != 1 else ''} "
                                 f"({shown}), got {got}")


def _positive(e) -> bool:
    while isinstance(e, A.EParen):
        e = e.inner
    return isinstance(e, A.Number) and e.value > 0

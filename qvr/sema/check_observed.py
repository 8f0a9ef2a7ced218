"""Extension E9.7 (docs/extensions.md): scores per element and observed computed values.

* `score v : T = e` — T resolves to finite objects (QVR309 otherwise); when the axes of e
  are known they must be T's axes (QVR325); not inside a marginalize block (QVR323).
* `observe v [: T] = e <- F(…)` — e is a let-expression read from data only: data steps,
  host data, program parameters, observed values and lets of those.  A read of a latent
  (a `sample` site, a marginalize coordinate, or a `let`/`score` that reads one) is
  QVR322 at the name read; the target must be a family (QVR324), e may not read `v`
  itself (QVR324), the step is not inside a marginalize block (QVR323), and e's axes,
  when known, are the site's (QVR325).

`ObservedChecks` is a mixin of `ProgramChecker`: `note_latent` records, per local, the
latent it depends on (None: data only), as the steps are checked in order.
"""
from __future__ import annotations

from typing import Optional

from qvr.sema import axes as X
from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema.resolve import resolve_type
from qvr.sema.types import is_discrete, is_unknown
from qvr.syntax import ast as A
from qvr.syntax.depth import child_nodes


def names_read(node) -> list:
    """The `Name` nodes of a let-expression in source order (binders included: an
    over-approximation)."""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Name):
            out.append(n)
        stack.extend(child_nodes(n))
    return sorted(out, key=lambda n: n.span.start)


class ObservedChecks:
    """E9.7 checks of `ProgramChecker` (a mixin; see the module docstring)."""

    def note_latent(self, name: str, latent: Optional[str]) -> None:
        self.__dict__.setdefault("latent_of", {})[name] = latent

    def latent_read(self, e) -> Optional[tuple]:
        """`(name node, latent)` of the first read in e of a local that depends on a
        latent; None when e reads data only."""
        table = self.__dict__.get("latent_of", {})
        for n in names_read(e):
            if self.visible(n.text) is not None and table.get(n.text):
                return n, table[n.text]
        return None

    def note_rhs(self, name: str, e) -> None:
        hit = self.latent_read(e)
        self.note_latent(name, hit[1] if hit else None)

    def _coordinate(self) -> Optional[str]:
        for scope in self.scopes:
            for local in scope.values():
                if local.kind == "marginalize":
                    return local.name
        return None

    def score_per_element(self, step: A.ScoreStep, vaxes) -> Optional[str]:
        """Check `score v : T = e`; returns T's hover text (None without `: T`)."""
        if step.index is None:
            return None
        ctx = self.ctx
        t = resolve_type(ctx, step.index)
        coord = self._coordinate()
        if coord is not None:
            ctx.report(SE.computed_in_marginalize(step.kw, f"`score {step.bind.text} : …` (one "
                                                 f"term per element)", coord))
        if is_unknown(t):
            return "?"
        if not is_discrete(t):
            ctx.report(E.not_finite(step.index.span, "the annotation of a score", t))
            return "?"
        want = X.type_expr_axes(step.index, self.object_type)
        if want is not None:
            self._same_axes(step.rhs, f"`score {step.bind.text} : {X.spell_axes(want)}`",
                            want, vaxes)
            return X.spell_axes(want)
        return "?"

    def _same_axes(self, e, what: str, want, got) -> None:
        if got is None or want is None or tuple(got) == tuple(want):
            return
        if tuple(a.size for a in got) == tuple(a.size for a in want) and \
                all(a.name is None or b.name is None for a, b in zip(got, want)):
            return  # an anonymous axis of the same size takes the object's name
        text = "is a scalar" if not got else f"has axes `{X.spell_axes(got)}`"
        self.ctx.report(SE.per_element_axes(e.span, what, X.spell_axes(want), text))

    def observe_value(self, step: A.ObserveStep, res) -> None:
        """Check the `= e` of `observe v [: T] = e <- F(…)` (before v is bound)."""
        e = step.value
        ctx = self.ctx
        for n in names_read(e):
            if n.text == step.bind.text and self.visible(n.text) is None:
                ctx.report(SE.computed_reads_itself(n.span, step.bind.text))
                return
        self.infer(e)
        hit = self.latent_read(e)
        if hit is not None:
            ctx.report(SE.observed_latent(hit[0].span, step.bind.text, hit[0].text, hit[1]))
            return
        coord = self._coordinate()
        if coord is not None:
            ctx.report(SE.computed_in_marginalize(step.kw, f"`observe {step.bind.text} = …` (an "
                                                 f"observed computed value)", coord))
        if res[0] in ("morphism", "template"):
            ctx.report(SE.computed_observe_target(step.target.name.span, step.bind.text,
                                                 step.target.name.text))
            return
        if res[0] != "family":
            return
        got = self.value_axes_of(e)
        want = self._e9_site_axes(step, res)
        if want is None or got is None:
            return
        if step.index is not None:
            self._same_axes(e, f"`observe {step.bind.text} : {X.spell_axes(want)}`", want, got)
        elif len(got) <= len(want):  # the arguments' axes: e may broadcast against them
            self._same_axes(e, f"`observe {step.bind.text}`", want[len(want) - len(got):], got)

"""How a run's recorded Pareto k-hat reads (`khat.py` computes it): one line for `qvr run`'s
summary, `qvr show` and the dashboard's Results, whatever the method (SVI, Laplace,
Pathfinder) that recorded it.  Torch-free (the dashboard's UI process imports it).

A run records ``khat`` (None when there was no tail to fit, ``inf`` when the ratios were
not finite), ``khat_draws`` (the draws scored), or ``khat_note`` (why it was not computed)
in its summary's ``stats``; a record without them (an MCMC run, or one written before
k-hat was recorded) has no line.

* ``Pareto k-hat 0.31 (1000 draws): good (below 0.5)``
* ``Pareto k-hat 0.64 (1000 draws): usable (0.5 to 0.7)``
* ``Pareto k-hat 0.98 (1000 draws): unreliable (above 0.7)``, and `recorded_khat_warning`
  the warning with the usual advice (`khat.khat_warning`, as the run emitted it).
* with ``--resample psis`` (``resampled``, ``resample_ess``, ``resample_note`` in the
  stats): ``Pareto k-hat 0.31 (4000 draws): good (below 0.5); draws resampled by PSIS
  (ESS 2650)``, or ``...; draws not resampled (k-hat 0.93 >= 0.7): the guide's own``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from qvr.inference.criticism.khat import KHAT_GOOD, KHAT_WARN, khat_warning

__all__ = ["khat_verdict", "khat_line", "resample_text", "importance_text",
           "recorded_khat_warning"]


def _number(v) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def khat_verdict(k: float) -> str:
    """``good`` below `KHAT_GOOD`, ``usable`` up to `KHAT_WARN`, ``unreliable`` above."""
    if k < KHAT_GOOD:
        return "good"
    if k <= KHAT_WARN:
        return "usable"
    return "unreliable"


_RANGE = {"good": f"below {KHAT_GOOD}", "usable": f"{KHAT_GOOD} to {KHAT_WARN}",
          "unreliable": f"above {KHAT_WARN}"}


def khat_line(stats: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The k-hat line of a run's ``stats``; None when they hold no k-hat (nor a note).
    A run with ``--resample psis`` adds what became of its draws (`resample_text`)."""
    stats = stats or {}
    line = _khat_only(stats)
    extra = resample_text(stats)
    if line is None or not extra:
        return line
    return f"{line}; {extra}"


def _khat_only(stats: Mapping[str, Any]) -> Optional[str]:
    note = stats.get("khat_note")
    if "khat" not in stats:
        return f"Pareto k-hat {note}" if note else None
    k = _number(stats.get("khat"))
    n = stats.get("khat_draws")
    draws = f" ({n} draws)" if isinstance(n, int) and not isinstance(n, bool) else ""
    if k is None or math.isnan(k):
        return f"Pareto k-hat: none{draws}, no tail to fit"
    verdict = khat_verdict(k)
    shown = "inf" if math.isinf(k) else f"{k:.2f}"
    return f"Pareto k-hat {shown}{draws}: {verdict} ({_RANGE[verdict]})"


def resample_text(stats: Optional[Mapping[str, Any]]) -> Optional[str]:
    """What ``--resample psis`` (or ``amis``) did with a run's draws
    (`qvr.inference.methods.guide_resample`): ``draws resampled by PSIS (ESS 412)``, or
    ``draws not resampled (k-hat 0.93 >= 0.7): the guide's own``; None for a run without
    the option (its stats hold neither ``resample_ess`` nor ``resample_note``:
    Pathfinder's own ``resampled`` says nothing here)."""
    stats = stats or {}
    if "resample_ess" not in stats and "resample_note" not in stats:
        return None
    if stats.get("resample_method") == "amis":  # `qvr.inference.methods.guide_amis`
        ess = _number(stats.get("resample_ess"))
        n = _number(stats.get("resample_draws"))
        rounds = stats.get("amis_rounds")
        how = (f"{rounds} rounds" if rounds else "") + \
            (f", {n:,.0f} draws" if n is not None else "") + \
            (f", ESS {ess:.0f}" if ess is not None else "")
        if stats.get("amis_resampled") is True:
            return f"draws resampled by adaptive importance sampling ({how.strip(', ')})"
        why = stats.get("resample_note") or "no reason recorded"
        return (f"draws not resampled by adaptive importance sampling ({why}): the "
                f"approximation's own")
    if stats.get("resampled") is True:
        ess = _number(stats.get("resample_ess"))
        return "draws resampled by PSIS" + (f" (ESS {ess:.0f})" if ess is not None else "")
    why = stats.get("resample_note") or "no reason recorded"
    return f"draws not resampled ({why}): the guide's own"


def importance_text(importance: tuple) -> str:
    """``--resample amis``'s rounds while they run (``(round, rounds, ESS)``, from its
    progress events, phase ``importance``): ``importance sampling: round 3 of 8, ESS
    1,234`` (`qvr run`'s live table and the dashboard's live note)."""
    r, total, ess = importance
    return f"importance sampling: round {r} of {total}, ESS {ess:,.0f}"


def recorded_khat_warning(stats: Optional[Mapping[str, Any]], method: str,
                          guide: Optional[str] = None, events=()) -> Optional[str]:
    """The warning of a k-hat above `KHAT_WARN`: the run's own (a `FitWarning` among
    `events` that starts ``Pareto k-hat``), else made again from `stats` as SVI makes it
    (`khat.khat_warning`; `guide`, the config's, for an SVI run only).  None at or below."""
    k = _number((stats or {}).get("khat"))
    if k is None or math.isnan(k) or k <= KHAT_WARN:
        return None
    for ev in events:
        message = getattr(ev, "message", None)
        if type(ev).__name__ == "FitWarning" and isinstance(message, str) and \
                message.startswith("Pareto k-hat"):
            return message
    return khat_warning(k, method, guide if method == "svi" else None)

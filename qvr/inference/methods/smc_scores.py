"""The score steps of a steering program as one SMC potential (docs/extensions.md E10,
"Potentials in the program"; issue 40).

At every step the sum of the program's score steps, evaluated on each child (the particle
extended by the new token `next`), is the child's log potential.  Each text call is
computed once per step over the children — a constraint by the text potential of
`qvr.smc.text_potentials` the command line uses for the same words (`forbid_words` is
``--forbid``'s, with the run's ``max_len``), a number per token by a table over the
vocabulary (`token_table`) — and each score expression is evaluated by the runtime's own
let-expression compiler (`qvr.runtime.letexpr.compile_let`), its text calls reading those
values (`qvr.runtime.steer_text`).  A score that is NaN or +inf for a child is a
`ValueError` naming the score step, its line, the child and the step."""
from __future__ import annotations

import math

import numpy as np
import torch

from qvr.smc.potentials import Potential


class _ScoreFrame:
    """The frame a compiled score expression reads: the step's text values, float64."""

    device = torch.device("cpu")

    def __init__(self, values: dict):
        self.values = values
        self.env: dict = {}

    def text_value(self, key):
        return self.values[key]

    def literal(self, v):
        return torch.tensor(float(v), dtype=torch.float64)


def _text_potential(call, lm, max_len):
    from qvr.smc import text_potentials as T
    decode, eos = lm.decode, lm.eos
    fn, args = call.function, call.args
    if fn == "forbid_words":
        return T.forbid_words(*args, decode=decode, eos=eos, max_len=max_len)
    if fn == "require_word":
        return T.require_word(args[0], args[1], decode=decode, eos=eos, max_len=max_len)
    if fn == "forbid_letters":
        return T.forbid_letters(args[0], decode=decode, eos=eos)
    if fn == "word_budget":
        return T.word_budget(args[0], decode=decode, eos=eos)
    if fn == "template":
        return T.template(args[0], decode=decode, eos=eos, max_len=max_len)
    texts = lm.token_texts()
    if fn == "count_letters":
        return T.token_table(T.letter_counts(args[0], texts, eos))
    if fn == "token_length":
        return T.token_table(T.token_lengths(texts, eos))
    raise ValueError(f"unknown text function `{fn}`")


class ProgramScores(Potential):
    """The steering program's score steps (`qvr.sema.steering_scores.SteerScore`) as one
    potential: ``log G = Σ_score value``."""

    def __init__(self, scores, lm, max_len=None):
        from qvr.runtime.letexpr import compile_let
        self.scores = tuple(scores)
        self.names = tuple(s.name for s in self.scores)
        self.parts = {c.key: _text_potential(c, lm, max_len)
                      for s in self.scores for c in s.calls}
        self.compiled = [compile_let(s.expr, lambda n: ("host", n), lambda t: None)
                         for s in self.scores]

    def log_potential(self, parents, children, t):
        from qvr.smc.potentials import Transitions
        return torch.from_numpy(self.log_potential_batch(Transitions.from_lists(parents,
                                                                                children)))

    def log_potential_batch(self, batch):
        n = len(batch)
        frame = _ScoreFrame({k: torch.as_tensor(np.asarray(p.log_potential_batch(batch),
                                                           dtype=np.float64))
                             for k, p in self.parts.items()})
        total = np.zeros(n)
        for s, f in zip(self.scores, self.compiled):
            v = f(frame, {})
            v = np.broadcast_to(np.asarray(v.detach().cpu(), dtype=np.float64), (n,))
            if n and not v.max() < math.inf:  # NaN or +inf
                i = int(np.flatnonzero(np.isnan(v) | np.isposinf(v))[0])
                raise ValueError(f"score step `{s.name}` (line {s.line}) is "
                                 f"{v[i]} for child {tuple(batch.children[i])!r} at step "
                                 f"{batch.t}; a log potential must be < +inf and not NaN")
            total = total + v
        return total

    def __repr__(self):
        return f"program_scores({', '.join(self.names)})"


def typed_module_of(program):
    """The checked module a loaded program (or export) keeps, or None."""
    return getattr(getattr(program, "qvr_binding", None), "typed", None) or \
        getattr(getattr(program, "owner", None), "typed", None) or \
        getattr(program, "typed", None)


def steered_of(program, export=None):
    """`qvr.sema.pretrained_export.steered_model` of `program`'s export (`export`, the
    export `program` is, or the module's first), or None."""
    from qvr.sema.pretrained_export import steered_model
    tm = typed_module_of(program)
    if tm is None:
        return None
    if export is None:
        export = getattr(getattr(program, "qvr_binding", None), "name", None)
    return steered_model(tm, export)

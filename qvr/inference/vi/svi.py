"""`SVI`: stochastic variational inference, one optimiser step at a time (runtime spec 6.5).

`step(x, observations)`: `optim.zero_grad()`; `loss = objective(model, guide, x,
observations)`; `loss.backward()`; `optim.step()`; return `loss.item()`.  The optimiser
holds whatever parameters the caller gave it.  No NaN guarding here, as the spec says: a
non-finite loss is returned to the caller (the `fit` driver turns it into a clear
`FitFailed` naming the step).  Progress reporting, cancellation and run folders are the
driver's job (`qvr.inference.fit`), not this class's.
"""
from __future__ import annotations

import torch


def adam(params, lr: float) -> torch.optim.Optimizer:
    """`torch.optim.Adam(params, lr)` with the fastest implementation torch offers for the
    parameters: the fused one (one native loop over all tensors: on CPU about 4 times
    faster than the default per-tensor loop for the seed's ~120 small tensors, which is
    a third of a small SVI step), else the multi-tensor one.  Same update rule.  Used by
    `qvr.inference.fit` (and so `qvr run --method svi`).

    The fused optimiser is a `FusedAdam`: torch's Adam whose steps, once its state exists,
    skip the per-parameter Python bookkeeping of `torch.optim.Adam.step` (see there)."""
    params = list(params)
    try:
        return FusedAdam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError, TypeError):  # a device or dtype without a fused kernel
        return torch.optim.Adam(params, lr=lr, foreach=True)


class FusedAdam(torch.optim.Adam):
    """`torch.optim.Adam(..., fused=True)` with a lean `step` for the common case.

    Torch's `step` rebuilds, at every call, the lists of parameters, gradients and state
    tensors in Python, and increments every parameter's 0-d `step` counter with one
    `_foreach_add_` (on CPU a loop of one small operation per tensor).  For ~120 small
    tensors that bookkeeping costs several times the update itself.  Here, after a first
    ordinary step has created the state, the lists are kept, the `step` counters are made
    0-d views of one shared vector (incremented with one operation; each parameter still
    has its own counter in `state`), and a step is one call of the same fused kernel
    (`torch._fused_adam_`) with the same arguments: the same updates, bit for bit.

    Any other situation takes torch's `step`: a closure, several parameter groups, a
    parameter without gradient, amsgrad, weight decay variants other than torch's
    default coupled one... (everything but the plain one-group, every-gradient case),
    a tensor learning rate or betas, parameters on several devices or of several dtypes,
    and any change to the parameter list, the state (e.g. `load_state_dict`) or the group.
    The kernel is private to PyTorch: where it is missing or its signature differs, every
    step is torch's (checked at construction and on the first lean step).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._fast = None
        # the lean step calls torch's private fused kernel: only where it exists
        self._lean = hasattr(torch, "_fused_adam_")

    def _fast_lists(self):
        """`(group, params, exp_avgs, exp_avg_sqs, steps, counter)` when the lean step
        applies to the current state, else None (the lists are rebuilt when stale)."""
        if len(self.param_groups) != 1:
            return None
        group = self.param_groups[0]
        fast = self._fast
        if fast is not None and fast[0] is group and fast[6] is self.state \
                and fast[1] is group["params"] and fast[7] == len(fast[1]):
            return fast
        self._fast = None
        params = group["params"]
        if not params or group["amsgrad"] or group["capturable"] or group["differentiable"] \
                or group.get("decoupled_weight_decay", False) or not group["fused"] \
                or isinstance(group["lr"], torch.Tensor) \
                or any(isinstance(b, torch.Tensor) for b in group["betas"]):
            return None
        p0 = params[0]
        states = [self.state.get(p) for p in params]
        if any(not st or "exp_avg" not in st for st in states):
            return None  # no state yet: the first step is torch's (it creates the state)
        if any(p.device != p0.device or p.dtype != p0.dtype or p.is_complex() for p in params):
            return None
        steps = [st["step"] for st in states]
        if any(t.dim() != 0 or t.device != steps[0].device or t.dtype != steps[0].dtype
               for t in steps):
            return None
        counter = torch.stack([t.detach() for t in steps])
        steps = list(counter.unbind(0))
        for st, t in zip(states, steps):
            st["step"] = t
        self._fast = (group, params, [st["exp_avg"] for st in states],
                      [st["exp_avg_sq"] for st in states], steps, counter, self.state,
                      len(params))
        return self._fast

    @torch.no_grad()
    def step(self, closure=None):
        fast = self._fast_lists() if closure is None and self._lean else None
        if fast is None:
            return _torch_adam_step(self, closure)
        group, params, exp_avgs, exp_avg_sqs, steps, counter = fast[:6]
        grads = [p.grad for p in params]
        if any(g is None for g in grads):
            return _torch_adam_step(self, closure)
        check = getattr(self, "_accelerator_graph_capture_health_check", None)
        if check is not None:
            check()
        beta1, beta2 = group["betas"]
        counter.add_(1)
        try:
            torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps,
                               amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2,
                               weight_decay=group["weight_decay"], eps=group["eps"],
                               maximize=group["maximize"], grad_scale=None, found_inf=None)
        except (AttributeError, TypeError, RuntimeError):
            # a PyTorch whose private fused kernel has another signature (the arguments are
            # checked before anything is written): undo the count, use torch's own step
            counter.sub_(1)
            self._lean = False
            self._fast = None
            return _torch_adam_step(self, closure)
        return None


def _torch_adam_step(opt, closure):
    """`torch.optim.Adam.step` without the optimizer-hook wrapper torch may have put
    around it (this class's own `step` is wrapped: hooks run once)."""
    step = torch.optim.Adam.step
    if getattr(step, "hooked", False):  # torch's `profile_hook_step` wrapper
        step = step.__wrapped__
    return step(opt, closure)


class SVI:
    """Stochastic variational inference.

    Args:
      model: the program whose `log_joint` is the target.
      guide: e.g. an `AutoNormalGuide`.
      optim: a `torch.optim.Optimizer` over the parameters to fit.
      objective: a callable `(model, guide, x, observations) -> scalar loss`, e.g. `ELBO()`.

    Example:
      >>> svi = SVI(model, guide, torch.optim.Adam(params, lr=5e-2), ELBO())  # doctest: +SKIP
      >>> loss = svi.step(x, observations)                                    # doctest: +SKIP
    """

    def __init__(self, model, guide, optim: torch.optim.Optimizer, objective=None, loss=None,
                 clip_norm: float = None):
        """`clip_norm`: when given, the gradients' total norm is clipped to it before each
        optimiser step (`torch.nn.utils.clip_grad_norm_`; Pyro's ClippedAdam): the flow
        guide's default (`FlowGuide.clip_norm`), whose stacked affine layers otherwise
        overshoot into non-finite draws at lr 0.01 (kid_scores: inf at step 16)."""
        self.clip_norm = clip_norm
        if objective is None:
            objective = loss
        if objective is None:
            from qvr.inference.vi.elbo import ELBO
            objective = ELBO()
        self.model = model
        self.guide = guide
        self.optim = optim
        self.objective = objective
        self._steps = 0
        self._comps = None  # the composites of model and guide, found at the first step

    def loss(self, x, observations=None) -> torch.Tensor:
        """The objective at the current parameters (differentiable; nothing is updated)."""
        return self.objective(self.model, self.guide, x, observations or {})

    def evaluate_loss(self, x, observations=None) -> float:
        with torch.no_grad():
            return float(self.loss(x, observations))

    def step(self, x, observations=None, *, row_scale: float = 1.0, loss_scale: float = 1.0,
             reduce=None) -> float:
        """One gradient step.

        Minibatches (`qvr.inference.data.minibatch`): `row_scale` multiplies every
        row-attributed term of the objective (`qvr.runtime.frame.rows_scaled`),
        `loss_scale` the whole loss before `backward`; `reduce(loss)`, called after
        `backward` and before the optimiser's step, may change the gradients (the
        data-parallel all-reduce) and returns the step's loss value.

        The Monte-Carlo densities of composites (runtime spec 4.1)
        use fresh common random numbers at every step: step `i` runs with every
        composite's `mc_seed` set to `i` (1, 2, ...) and restored afterwards.

        Decision: spec 9.3 makes a composite's density a deterministic function of its
        parameters and inputs (`mc_seed`, default 0), which MCMC needs; an optimiser
        that saw the same draws at every step would fit those draws instead of the
        model.  A decoder-only transformer shows it plainly: with fixed draws it learned
        to read the next token from the per-sequence noise (0.18 nats/token on its
        training corpus with the fixed seed, 4.7 with any other).  Outside `step` the
        program is unchanged, so `evaluate_loss` and `log_joint` keep the spec's value."""
        self._steps += 1
        seeds = [(c, c.mc_seed) for c in self._composites()]
        try:
            for c, _ in seeds:
                c.mc_seed = self._steps
            self.optim.zero_grad()
            if row_scale != 1.0:
                from qvr.runtime.frame import rows_scaled
                with rows_scaled(row_scale):
                    loss = self.loss(x, observations)
            else:
                loss = self.loss(x, observations)
            if loss_scale != 1.0:
                loss = loss * loss_scale
            loss.backward()
            value = reduce(loss.detach()) if reduce is not None else loss.item()
            if self.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(
                    [p for g in self.optim.param_groups for p in g["params"]
                     if p.grad is not None], self.clip_norm)
            self.optim.step()
        finally:
            for c, seed in seeds:
                c.mc_seed = seed
        return value

    def _composites(self) -> list:
        if self._comps is None:
            from qvr.runtime.combinators import composites
            self._comps = composites(self.model, self.guide)
        return self._comps

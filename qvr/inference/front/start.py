"""Starting a fit from a saved run (`fit(..., start_from=RUN)`, `qvr run --from RUN`).

What a run gives the next fit:

* its **model parameters** (``params.npz``, ``model.NAME``: every method saves them) are
  loaded into the program — so SMC generates from an SVI-fitted language model, and any
  fit continues from fitted weights;
* an **SVI run's guide** (``loc_*``, ``log_scale_*``) initialises the next SVI guide (to
  continue fitting) or the initial positions of HMC/NUTS (one guide draw per chain);
* an **MCMC run's posterior means** (``samples.npz``) initialise the next guide's
  locations, or HMC/NUTS's initial positions (``start_at="means"``, the default);
* or an **MCMC run's draws** (``start_at="draws"``, `FitConfig.start_at`): HMC/NUTS chain
  c starts at the last draw of the run's chain ``c mod C_run`` (`initial_positions`), so
  the chains start dispersed where the earlier run left them (continuing that run); SVI's
  guide is moment-matched to the draws in the unconstrained space (`apply_to_guide`).
  The draws are ``samples.npz``'s, else (a run killed or cancelled before it saved them)
  those of its draw chunks (`qvr.runs.Run.draws`, cut to the draws every chain has).

Why the last draw, and not draws spread over the run: the last draw of a chain is where
that chain stands — a sample of the posterior after warmup, with the chains as dispersed
as the posterior is — so the new chains continue the old ones (R-hat across the two runs
stays meaningful); a random draw of the pooled chains would do as well statistically but
would not continue anything.  Why moment matching for SVI: the mean-field Normal guide
closest to the draws in the unconstrained space (its mean and per-coordinate variance;
the population sd, ddof 0) is the best start the guide's family allows; the sd is floored
at ``SD_FLOOR`` (1e-3) so that a coordinate the draws never moved (a single draw, a stuck
chain) does not start at a degenerate scale whose log is -inf or whose gradient explodes.

A program whose parameters no longer match the run's (a renamed morphism, a changed
width) is a `StartError` naming the QVR declaration the parameter belongs to (the
morphism, and the parameter within it: `declaration_of`), and saying when the program's
text changed since the run.  The record of the new run names the run it started from and that
run's source hash (`StartState.record`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

SD_FLOOR = 1e-3  # the smallest guide scale a start from draws gives (module docstring)


class StartError(ValueError):
    """The run to start from cannot be used (unreadable, or its parameters do not match)."""


@dataclass
class StartState:
    run: Any  # qvr.runs.Run
    model_params: dict = field(default_factory=dict)
    guide_params: dict = field(default_factory=dict)
    posterior_means: dict = field(default_factory=dict)
    current_sha256: Optional[str] = None  # the hash of the program being fitted now
    # start_at="draws": the run's draws by site, (chains, draws, *shape) as samples.npz
    draws: dict = field(default_factory=dict)
    at: Optional[str] = None  # `FitConfig.start_at` of an SVI/HMC/NUTS fit, None for SMC

    def record(self) -> dict:
        out = {"run": str(self.run.path.resolve()), "run_id": self.run.run_id,
               "method": self.run.method, "sha256": self.run.source_sha256}
        if self.at is not None:
            out["at"] = self.at
        return out

    def _where(self) -> str:
        return f"start from {self.run.path}"

    def apply_to_model(self, module) -> None:
        """Load the run's model parameters into `module` (names and shapes must match)."""
        if not self.model_params:
            return
        own = dict(module.named_parameters())
        changed = self._changed_note()
        for name, value in self.model_params.items():
            if name not in own:
                raise StartError(f"{self._where()}: the run has a parameter of "
                                 f"{declaration_of(module, name)}, which this program does "
                                 f"not{changed}")
            if tuple(own[name].shape) != tuple(value.shape):
                raise StartError(f"{self._where()}: {declaration_of(module, name)} has shape "
                                 f"{tuple(value.shape)} in the run but "
                                 f"{tuple(own[name].shape)} in this program{changed}")
        missing = [n for n in own if n not in self.model_params]
        if missing:
            raise StartError(f"{self._where()}: this program's "
                             f"{declaration_of(module, missing[0])} is not in the run"
                             f"{changed}")
        with torch.no_grad():
            for name, value in self.model_params.items():
                p = own[name]
                p.copy_(torch.as_tensor(value, dtype=p.dtype, device=p.device))

    def _changed_note(self) -> str:
        sha = self.current_sha256
        if sha and self.run.source_sha256 and sha != self.run.source_sha256:
            return " (the program's text has changed since that run)"
        return ""

    def apply_to_guide(self, guide, x=None, observations=None) -> None:
        """Initialise a guide from the run: an SVI run's guide as it was, an MCMC run's
        posterior means mapped to the guide's unconstrained space (through the sites'
        transforms, which need the guide's program, its input and observations), or
        (``start_at="draws"``) the guide moment-matched to the MCMC run's draws.

        A joint guide (`qvr.inference.vi.joint_guides`: fullrank, lowrank, flow) takes an
        SVI run of its own family and size as it was; any other SVI run (mean-field, or
        another joint family, through the per-site marginals it saved) gives it per-site
        means and standard deviations (`init_sites`), MCMC means its means, and draws
        their means and sds (a fullrank guide: their covariance)."""
        joint = hasattr(guide, "init_sites")
        own = dict(guide.named_parameters())
        with torch.no_grad():
            if self.draws:
                self._match_draws(guide, own, x, observations)
            elif self.guide_params:
                if joint and not self._same_family(own):
                    locs, sds = {}, {}
                    for site in guide.latent_names:
                        loc = self.guide_params.get(f"loc_{site}")
                        log_scale = self.guide_params.get(f"log_scale_{site}")
                        if loc is None:
                            continue
                        want = tuple(guide.loc(site).shape)
                        if tuple(np.shape(loc)) != want:
                            raise StartError(f"{self._where()}: guide parameter `loc_{site}` "
                                             f"has shape {tuple(np.shape(loc))} in the run "
                                             f"but {want} here (different data size?)")
                        locs[site] = torch.as_tensor(loc, dtype=torch.float64)
                        if log_scale is not None:
                            sds[site] = torch.exp(torch.as_tensor(log_scale,
                                                                  dtype=torch.float64))
                    guide.init_sites(locs, sds)
                    return
                for name, value in self.guide_params.items():
                    p = own.get(name)
                    if p is None:
                        continue  # a site the new data observes: nothing to start
                    if tuple(p.shape) != tuple(value.shape):
                        raise StartError(f"{self._where()}: guide parameter `{name}` has shape "
                                         f"{tuple(value.shape)} in the run but "
                                         f"{tuple(p.shape)} here (different data size?)")
                    p.copy_(torch.as_tensor(value, dtype=p.dtype, device=p.device))
            elif self.posterior_means:
                from qvr.inference.programs.sites import build_registry
                obs = dict(observations or {})
                reg = build_registry(guide.model[0], x, obs, observed_names=set(obs))
                locs = {}
                for site, mean in self.posterior_means.items():
                    spec = reg.by_name.get(site)
                    if spec is None or site not in guide.latent_names:
                        continue
                    p = guide.loc(site)
                    value = torch.as_tensor(mean, dtype=p.dtype, device=p.device)
                    if value.numel() != p.numel() and value.numel() != \
                            int(torch.Size(spec.batch_shape).numel()) * spec.d:
                        raise StartError(f"{self._where()}: site `{site}` has "
                                         f"{value.numel()} values in the run but a different "
                                         f"shape here (different data size?)")
                    value = spec.transform.inv(value.reshape(*spec.batch_shape, spec.d))
                    if value.numel() != p.numel():
                        raise StartError(f"{self._where()}: site `{site}` has "
                                         f"{value.numel()} values in the run but {p.numel()} "
                                         f"here (different data size?)")
                    locs[site] = value.reshape(p.shape)
                if joint:
                    guide.init_sites(locs)
                else:
                    for site, value in locs.items():
                        own[f"loc_{site}"].copy_(value)

    def _same_family(self, own: dict) -> bool:
        """Whether the run's joint parameters (``joint_*``) are exactly this guide's."""
        mine = {k: tuple(p.shape) for k, p in own.items() if k.startswith("joint_")}
        theirs = {k: tuple(np.shape(v)) for k, v in self.guide_params.items()
                  if k.startswith("joint_")}
        return bool(mine) and mine == theirs or (not mine and not theirs)

    def _match_draws(self, guide, own, x, observations) -> None:
        """``loc = mean``, ``log_scale = log(max(sd, SD_FLOOR))`` of the run's draws mapped
        to the unconstrained space, per coordinate (ddof 0), in float64.  A local site's
        guide has one ``(u,)`` pair shared by every row and position, so its moments pool
        the draws of all rows and positions.  A joint guide takes the means and sds
        (`init_sites`); a fullrank one the draws' covariance of its joint sites."""
        from qvr.inference.programs.sites import build_registry
        obs = dict(observations or {})
        reg = build_registry(guide.model[0], x, obs, observed_names=set(obs))
        locs, sds, joint_z = {}, {}, []
        layout = getattr(guide, "layout", None)
        joint_names = {s.name for s, _, _ in layout} if layout is not None else set()
        for site in guide.latent_names:
            spec = reg.by_name.get(site)
            if spec is None:
                continue
            shape = tuple(guide.loc(site).shape)
            numel = int(np.prod(shape))
            z = self._unconstrained_draws(spec)  # (N, *batch, u)
            if z.shape[-1] != shape[-1] or z.numel() % numel:
                raise StartError(f"{self._where()}: site `{site}` has {z[0].numel()} "
                                 f"unconstrained values per draw in the run but "
                                 f"{numel} in this guide (different data size?)")
            z = z.reshape(-1, *shape)
            locs[site] = z.mean(dim=0)
            sds[site] = z.std(dim=0, unbiased=False).clamp(min=SD_FLOOR)
            if site in joint_names:
                joint_z.append((site, z.reshape(z.shape[0], -1)))
        if layout is None:
            for site in locs:
                own[f"loc_{site}"].copy_(locs[site].to(own[f"loc_{site}"].dtype))
                own[f"log_scale_{site}"].copy_(torch.log(sds[site]).to(
                    own[f"log_scale_{site}"].dtype))
            return
        guide.init_sites(locs, sds)
        if hasattr(guide, "init_covariance") and len(joint_z) == len(layout) and joint_z:
            order = {s.name: i for i, (s, _, _) in enumerate(layout)}
            z = torch.cat([v for _, v in sorted(joint_z, key=lambda t: order[t[0]])], dim=1)
            mean = z.mean(0)
            cov = torch.cov(z.T, correction=0).reshape(z.shape[1], z.shape[1])
            cov = cov + torch.eye(z.shape[1], dtype=cov.dtype) * SD_FLOOR ** 2
            guide.init_covariance(mean, cov)

    def _unconstrained_draws(self, spec, last: bool = False) -> torch.Tensor:
        """The run's draws of a site (`last`: only each chain's last one) mapped to the
        unconstrained space in float64: ``(N, *batch_shape, u)``, N the draws taken
        (chain-major).  A site the run lacks, of another size, or whose draws do not map
        to finite values is a `StartError` naming it."""
        if spec.name not in self.draws:
            raise StartError(f"{self._where()}: this program's latent site `{spec.name}` "
                             f"has no draws in the run{self._changed_note()}")
        a = np.asarray(self.draws[spec.name])  # (chains, draws, *shape)
        if last:
            a = a[:, -1:]
        per = int(torch.Size(spec.batch_shape).numel()) * spec.d
        n = a.shape[0] * a.shape[1]
        if a.size != n * per:
            raise StartError(f"{self._where()}: site `{spec.name}` has {a.size // max(n, 1)} "
                             f"values per draw in the run but {per} here (different data "
                             f"size?){self._changed_note()}")
        v = torch.as_tensor(a, dtype=torch.float64).reshape(n, *spec.batch_shape, spec.d)
        z = spec.transform.inv(v)
        if not bool(torch.isfinite(z).all()):
            raise StartError(f"{self._where()}: a draw of site `{spec.name}` lies on the "
                             f"boundary of its support (its unconstrained value is not "
                             f"finite); start_at means avoids it")
        return z

    def initial_positions(self, target, num_chains: int) -> torch.Tensor:
        """HMC/NUTS initial positions ``(num_chains, D)`` from the run's draws: chain c at
        the last draw of the run's chain ``c mod C_run``, mapped to the unconstrained space
        through each site's transform (``target.registry``'s order and blocks), in the
        default dtype on the CPU (the driver moves them: `MCMC.run(initial=...)`)."""
        reg = getattr(target, "registry", None)
        if reg is None:
            raise StartError(f"{self._where()}: start_at draws needs a program's sites "
                             f"to map the draws to (this target has none)")
        dtype = torch.get_default_dtype()
        blocks = [self._unconstrained_draws(s, last=True).reshape(-1, s.size)
                  for s in reg.sites]
        if not blocks:
            return torch.zeros(num_chains, 0, dtype=dtype)
        last = torch.cat(blocks, dim=1)  # (C_run, D): each chain's last draw
        rows = [last[c % last.shape[0]] for c in range(num_chains)]
        return torch.stack(rows).to(dtype)

    def init_guide(self, model, x, observations):
        """A guide to draw HMC/NUTS initial positions from (None: nothing to start from)."""
        if not (self.guide_params or self.posterior_means):
            return None
        from qvr.inference.vi.guides import AutoNormalGuide
        guide = AutoNormalGuide(model, observed_names=set(observations)).to(x.device)
        self.apply_to_guide(guide, x, observations)
        if self.posterior_means and not self.guide_params:
            with torch.no_grad():
                for name, p in guide.named_parameters():
                    if name.startswith("log_scale_"):
                        p.fill_(-6.0)  # start at the means, barely jittered
        return guide


def declaration_of(module, name: str) -> str:
    """The QVR declaration a torch parameter path belongs to, for messages: "morphism
    `ff` (parameter `param_source.net.4.weight`)" for
    ``_step_h.right.left.right.param_source.net.4.weight``.

    The declaration is the nearest module on the path that carries the name it was bound
    to (`qvr.runtime.compile` marks it ``_qvr_named``: a declared morphism, a replicated
    copy ``head_0``, a ``let``, the program); when several distinct modules carry that
    name (the deep copies `stack` makes) the message says which copy, in order of
    application.  A path that does not lead into `module` (a parameter of a run whose
    program has since changed shape) is resolved as far as it goes, else given as is."""
    modules = dict(module.named_modules())
    parts = name.split(".")
    for cut in range(len(parts) - 1, -1, -1):
        path = ".".join(parts[:cut])
        m = modules.get(path)
        if m is None or not getattr(m, "_qvr_named", False) or not getattr(m, "label", None):
            continue
        rest = ".".join(parts[cut:])
        kind = "program" if hasattr(m, "log_joint") else "morphism"
        # the distinct modules bound to this name, in order of application
        same = list({id(o): o for o in module.modules()
                     if getattr(o, "_qvr_named", False)
                     and getattr(o, "label", None) == m.label}.values())
        copy = ""
        if len(same) > 1:
            i = next(k for k, o in enumerate(same) if o is m)
            copy = f"copy {i + 1} of {len(same)}, "
        return f"{kind} `{m.label}` ({copy}parameter `{rest}`)"
    return f"parameter `{name}`"


def describe(method: str, run_method: Optional[str], at: Optional[str]) -> str:
    """What a fit of `method` takes from a run of `run_method` (``qvr run``'s start line)."""
    if method == "smc":
        return "its model parameters"
    if run_method == "svi":
        return "its guide and model parameters"
    if run_method in ("hmc", "nuts"):
        if at == "draws":
            return "its chains' last draws" if method in ("hmc", "nuts") else \
                "its draws (the guide moment-matched to them)"
        return "its posterior means"
    return "its model parameters"


def require_start(config, start) -> None:
    """`ConfigError` (naming ``start_at``) when ``start_at="draws"`` has no run to start
    from (`qvr.inference.config.start_at_error`; the run's own kind is checked by
    `load_start`)."""
    from qvr.inference.config import ConfigError, start_at_error
    if start is None:
        msg = start_at_error(config.start_choice, has_run=False)
        if msg:
            raise ConfigError({"start_at": msg})


def load_start(start_from, config=None) -> StartState:
    """The `StartState` of a run folder (or `qvr.runs.Run`), for a fit of `config`
    (``start_at``: the run's means or its draws; None: means)."""
    from qvr.inference.config import start_at_error
    from qvr.runs import Run, RunRecordError, open_run
    try:
        run = start_from if isinstance(start_from, Run) else open_run(start_from)
    except RunRecordError as exc:
        raise StartError(f"cannot start from {start_from}: {exc}") from None
    status = run.status
    if status == "running":
        raise StartError(f"cannot start from {run.path}: that run is still running")
    try:
        params = run.params()
        samples = run.samples()
    except RunRecordError as exc:
        raise StartError(f"cannot start from {run.path}: {exc}") from None
    at = config.start_choice if config is not None else None
    problem = start_at_error(at, run.method)
    if problem:
        raise StartError(f"start from {run.path}: start_at {problem}")
    model = {k[len("model."):]: v for k, v in params.items() if k.startswith("model.")}
    guide = {k: v for k, v in params.items()
             if k.startswith(("loc_", "log_scale_", "joint_"))}
    means, draws = {}, {}
    if at == "draws":
        draws = _site_draws(samples)
        if not draws:  # killed or cancelled before samples.npz: its draw chunks
            try:
                draws = _site_draws(run.draws())
            except RunRecordError as exc:
                raise StartError(f"cannot start from {run.path}: {exc}") from None
        if not draws:
            raise StartError(f"start from {run.path}: start_at draws: the run recorded no "
                             f"draws (status {status})")
        guide = {}
    elif run.method in ("hmc", "nuts"):
        # (a run cancelled in warmup has no draws: no means, rather than NaN ones)
        means = {k: v.mean(axis=(0, 1)) for k, v in _site_draws(samples).items()}
    if not (model or guide or means or draws):
        raise StartError(f"cannot start from {run.path}: the run saved no parameters or "
                         f"draws (status {status})")
    return StartState(run, model, guide, means, draws=draws, at=at)


def _site_draws(samples: dict) -> dict:
    """The sites' draws of a ``samples.npz`` mapping (no sampler statistics), when every
    chain has at least one."""
    out = {k: np.asarray(v) for k, v in samples.items()
           if not k.startswith("sample_stats.") and np.asarray(v).ndim >= 2}
    if not out or any(v.shape[1] == 0 for v in out.values()):
        return {}
    return out

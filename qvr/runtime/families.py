"""Distribution families at run time: torch distributions for steps and for kernels.

The family *table* (names, parameter names, order and kinds, event ranks, where each family
may be used) is the front end's `qvr.sema.families.FAMILIES`; this module reads it and adds
only what the runtime spec (sections 3.3, 5.3a and 9.4) says about computing each family:

* `inline_distribution(name, args, event_size)` builds the torch distribution of a
  `sample`/`observe`/`marginalize` step target, with the safety clamps of spec 9.4
  (positive parameters `>= EPS`, unit parameters in `[EPS, 1-EPS]`);
* `KernelFamily` maps the raw output of a kernel's parameter source (a lookup table or an
  MLP) to the family's parameters, and draws and scores values of a `Real d` (or finite)
  codomain.

Families the table marks *opt* in a position are not implemented here; `inline_supported`
and `kernel_supported` say so and the compiler then reports QVR950.  This module does not
know about morphisms, programs or shapes of objects beyond the codomain width `d`.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch.distributions import constraints
import torch.distributions as D

from qvr.sema.families import FAMILIES

EPS = 1e-7
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

# ------------------------------------------------------------------ inline (step targets)

#: torch classes of the families whose step construction is "the class of the same name
#: with the section-9 parameters as keywords" (runtime spec 5.3a).
_TORCH_BY_NAME = {
    "Normal": D.Normal, "Cauchy": D.Cauchy, "Laplace": D.Laplace, "Gumbel": D.Gumbel,
    "StudentT": D.StudentT, "LogNormal": D.LogNormal, "HalfNormal": D.HalfNormal,
    "HalfCauchy": D.HalfCauchy, "Exponential": D.Exponential, "Gamma": D.Gamma,
    "InverseGamma": D.InverseGamma, "Chi2": D.Chi2, "Weibull": D.Weibull, "Pareto": D.Pareto,
    "FisherSnedecor": D.FisherSnedecor, "Uniform": D.Uniform, "Beta": D.Beta,
    "Kumaraswamy": D.Kumaraswamy, "Bernoulli": D.Bernoulli, "Poisson": D.Poisson,
    "NegativeBinomial": D.NegativeBinomial, "Geometric": D.Geometric,
    "ContinuousBernoulli": D.ContinuousBernoulli,
}
_SPECIAL_INLINE = {"LogitNormal", "TruncatedNormal", "Dirichlet", "Categorical",
                   "Flat", "HalfFlat"}  # E9.2: improper priors (qvr.runtime.constraints)
#: E9.9 multivariate families (`LKJCholesky` is built by `constraints.SupportStep` only,
#: with `over=` a `CorrCholesky K` space)
_MULTIVARIATE = {"MultivariateNormal", "MultivariateNormalCov", "LowRankMVN"}
INLINE_FAMILIES = frozenset(_TORCH_BY_NAME) | _SPECIAL_INLINE | _MULTIVARIATE


def inline_supported(name: str) -> bool:
    return name in INLINE_FAMILIES


def _float_args(args):
    """Cast every argument to a common float dtype (the default, or float64 if present)."""
    dtype = torch.get_default_dtype()
    for a in args:
        if a.is_floating_point() and a.dtype == torch.float64:
            dtype = torch.float64
    return [a.to(dtype) if a.dtype != dtype else a for a in args]


def clamp_param(x: torch.Tensor, kind: str) -> torch.Tensor:
    """Safety clamps of spec 9.4 by parameter kind (`pos`, `unit`; others unchanged)."""
    if kind == "pos":
        return x.clamp(min=EPS)
    if kind == "unit":
        return x.clamp(EPS, 1 - EPS)
    return x


def inline_distribution(name: str, args, event_size: Optional[int] = None,
                        default_event_size: Optional[int] = None) -> D.Distribution:
    """The distribution of `Family(args)` in a program step (args already tensors).

    `event_size` is the size named by `over=` (authoritative); `default_event_size` (the
    program's codomain) is used only to broadcast a scalar Dirichlet concentration.
    """
    fam = FAMILIES[name]
    if fam.improper:  # E9.2: `Flat`, `HalfFlat` (no arguments)
        from qvr.runtime.improper import improper
        return improper(name, event_size)
    args = _float_args(list(args))
    vals = [clamp_param(a, kind) for a, (_, kind) in zip(args, fam.params)]
    if name == "LogitNormal":
        return D.TransformedDistribution(D.Normal(vals[0], vals[1], validate_args=False),
                                         [D.SigmoidTransform()], validate_args=False)
    if name == "TruncatedNormal":
        return TruncatedNormal(*vals)
    if name == "Categorical":
        return D.Categorical(probs=vals[0], validate_args=False)
    if name == "Dirichlet":
        conc = vals[0]
        size = event_size if event_size is not None else (
            default_event_size if conc.dim() == 0 else None)
        if size is not None and (conc.dim() == 0 or conc.shape[-1] != size):
            conc = conc.unsqueeze(-1).expand(*conc.shape, size)
        return D.Dirichlet(conc, validate_args=False)
    if name == "Bernoulli":
        return ClampedBernoulli(probs=vals[0], validate_args=False)
    if name in _MULTIVARIATE:
        return multivariate(name, vals)
    cls = _TORCH_BY_NAME[name]
    kw = {p: v for (p, _), v in zip(fam.params, vals)}
    return cls(**kw, validate_args=False)


def multivariate(name: str, vals) -> D.Distribution:
    """E9.9: `MultivariateNormal(loc, scale_tril)`, `MultivariateNormalCov(loc,
    covariance_matrix)`, `LowRankMVN(loc, cov_factor, cov_diag)`.  The event size K is the
    matrix's row count; a scalar `loc` (or `cov_diag`) is broadcast to K; the entries of
    `scale_tril` above its diagonal are ignored, as its name says.  The covariance
    form factors its matrix with `cholesky_ex`: a matrix that is not positive definite
    gives a NaN density (an MCMC proposal there is rejected as divergent), not an
    exception."""
    loc, mat = vals[0], vals[1]
    k = mat.shape[-2]
    if loc.dim() == 0:
        loc = loc.expand(k)
    if name == "LowRankMVN":
        diag = vals[2]
        if diag.dim() == 0:
            diag = diag.expand(k)
        return D.LowRankMultivariateNormal(loc, mat, diag, validate_args=False)
    if name == "MultivariateNormalCov":
        mat, _ = torch.linalg.cholesky_ex(mat)
    else:  # only the lower triangle is the factor (draws would read the upper one too)
        mat = torch.tril(mat)
    return D.MultivariateNormal(loc, scale_tril=mat, validate_args=False)


class ClampedBernoulli(D.Bernoulli):
    """`Bernoulli(p)` of a program step, `p` already clamped to `[EPS, 1 - EPS]` (spec 9.4).

    `log_prob(y) = y log p + (1 - y) log(1 - p)` directly: the same law as
    `torch.distributions.Bernoulli`, whose `log_prob` converts `p` to logits (a second,
    tighter clamp to float epsilon, `log p - log1p(-p)`) and then evaluates the
    numerically stable binary cross-entropy with logits — four times the operations,
    forward and backward, for no gain once `p` is bounded away from 0 and 1.  It matters
    where the density is evaluated many times (an MCMC gradient).  The values agree to
    float rounding for `p` in `[1.2e-7, 1 - 1.2e-7]`; below that torch's second clamp
    would move `p`, this one keeps the spec's `EPS`.
    """

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        p = self.probs
        value = value.to(p.dtype)
        if value.shape != p.shape:
            value, p = torch.broadcast_tensors(value, p)
        return value * torch.log(p) + (1 - value) * torch.log1p(-p)


def draw(dist: D.Distribution, sample_shape=torch.Size()) -> torch.Tensor:
    """Reparameterised draw where torch supports it and a gradient may be asked for;
    discrete draws as int64.

    Without autograd (`torch.no_grad`: predictive replicates, prior draws) the law's
    `sample`: the same law, and for the common families an out-of-place sampler
    (`Normal.sample` is `torch.normal(loc, scale)`, where `rsample` fills an unbatched
    `empty(shape).normal_()`), which `torch.func.vmap(..., randomness="different")` can
    batch: a run's 4,000 posterior-predictive replicates are then one vmapped pass of the
    program instead of 4,000 (eight schools: 0.9 s -> 0.05 s).  The families whose torch
    sampler fills a tensor in place even there are drawn here from `torch.randn` /
    `torch.rand` by their textbook constructions (`_OUT_OF_PLACE`): the multivariate
    Normals, StudentT, Cauchy, Laplace and Exponential."""
    if dist.has_rsample and torch.is_grad_enabled():
        out = dist.rsample(sample_shape)
    else:
        own = _OUT_OF_PLACE.get(type(dist))
        out = own(dist, torch.Size(sample_shape)) if own is not None else \
            dist.sample(sample_shape)
    if is_discrete_dist(dist):
        out = out.long()
    return out


def _mvn_sample(dist, sample_shape: torch.Size) -> torch.Tensor:
    """A draw of `MultivariateNormal` (`loc + L eps`) or `LowRankMultivariateNormal`
    (`loc + W eps_W + sqrt(d) eps_D`) from `torch.randn`, out of place: the law torch's
    `rsample` draws, in a form `vmap(randomness="different")` batches."""
    shape = _shape_of(dist, sample_shape)
    loc = dist.loc
    if isinstance(dist, D.MultivariateNormal):
        eps = torch.randn(shape, dtype=loc.dtype, device=loc.device)
        return loc + (dist.scale_tril @ eps.unsqueeze(-1)).squeeze(-1)
    w = dist.cov_factor
    eps_w = torch.randn(shape[:-1] + w.shape[-1:], dtype=loc.dtype, device=loc.device)
    eps_d = torch.randn(shape, dtype=loc.dtype, device=loc.device)
    return loc + (w @ eps_w.unsqueeze(-1)).squeeze(-1) + dist.cov_diag.sqrt() * eps_d


def _shape_of(dist, sample_shape: torch.Size) -> torch.Size:
    return sample_shape + dist.batch_shape + dist.event_shape


def _uniform(dist, sample_shape: torch.Size) -> torch.Tensor:
    """Uniforms on [0, 1) of the draw's shape, dtype and device."""
    like = dist.rate if isinstance(dist, D.Exponential) else dist.loc
    return torch.rand(_shape_of(dist, sample_shape), dtype=like.dtype, device=like.device)


def _student_t_sample(dist, sample_shape: torch.Size) -> torch.Tensor:
    """`loc + scale x / sqrt(z / df)`, x ~ N(0, 1), z ~ chi2(df) (torch's construction)."""
    shape = _shape_of(dist, sample_shape)
    df = dist.df.expand(shape)
    x = torch.randn(shape, dtype=df.dtype, device=df.device)
    with warnings.catch_warnings():  # under vmap: Gamma's clamp_ has no batching rule
        warnings.simplefilter("ignore", UserWarning)
        z = D.Gamma(0.5 * df, torch.full_like(df, 0.5)).sample()
    return dist.loc + dist.scale * x * torch.rsqrt(z / df)


def _cauchy_sample(dist, sample_shape: torch.Size) -> torch.Tensor:
    """`loc + scale tan(pi (u - 1/2))`, as torch's `cauchy_`."""
    return dist.loc + dist.scale * torch.tan(math.pi * (_uniform(dist, sample_shape) - 0.5))


def _unit_exponential(dist, sample_shape: torch.Size) -> torch.Tensor:
    """Exponential(1) draws `-log(1 - u)`, u in [0, 1): finite."""
    return -torch.log1p(-_uniform(dist, sample_shape))


def _exponential_sample(dist, sample_shape: torch.Size) -> torch.Tensor:
    """`e / rate`, e ~ Exponential(1)."""
    return _unit_exponential(dist, sample_shape) / dist.rate


def _laplace_sample(dist, sample_shape: torch.Size) -> torch.Tensor:
    """`loc +- scale e`, e ~ Exponential(1), the sign a fair coin."""
    e = _unit_exponential(dist, sample_shape)
    sign = torch.where(_uniform(dist, sample_shape) < 0.5, -1.0, 1.0).to(e.dtype)
    return dist.loc + dist.scale * sign * e


#: the families drawn here without autograd (`draw`): torch's own samplers fill a tensor
#: in place, which `vmap(randomness="different")` refuses
_OUT_OF_PLACE = {D.MultivariateNormal: _mvn_sample, D.LowRankMultivariateNormal: _mvn_sample,
                 D.StudentT: _student_t_sample, D.Cauchy: _cauchy_sample,
                 D.Exponential: _exponential_sample, D.Laplace: _laplace_sample}


def is_discrete_dist(dist: D.Distribution) -> bool:
    sup = dist.support
    return bool(getattr(sup, "is_discrete", False))


class TruncatedNormal(D.Distribution):
    """`Normal(mu, sigma)` restricted to `[low, high]` and renormalised (inverse-CDF draws)."""

    arg_constraints = {}
    has_rsample = True

    def __init__(self, mu, sigma, low, high, validate_args=False):
        self.mu, self.sigma, self.low, self.high = torch.broadcast_tensors(mu, sigma, low, high)
        self._a = (self.low - self.mu) / self.sigma
        self._b = (self.high - self.mu) / self.sigma
        self._cdf_a = _ndtr(self._a)
        self._cdf_b = _ndtr(self._b)
        self._log_z = torch.log((self._cdf_b - self._cdf_a).clamp(min=1e-38))
        super().__init__(self.mu.shape, validate_args=False)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        u = torch.rand(shape, dtype=self.mu.dtype, device=self.mu.device)
        p = self._cdf_a + u * (self._cdf_b - self._cdf_a)
        z = torch.special.ndtri(p.clamp(EPS, 1 - EPS))
        return torch.maximum(torch.minimum(self.mu + self.sigma * z, self.high), self.low)

    def log_prob(self, value):
        z = (value - self.mu) / self.sigma
        return -0.5 * z * z - _LOG_SQRT_2PI - torch.log(self.sigma) - self._log_z

    @property
    def mean(self):
        phi = lambda t: torch.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)  # noqa: E731
        return self.mu + self.sigma * (phi(self._a) - phi(self._b)) / torch.exp(self._log_z)


def _ndtr(x):
    return torch.special.ndtr(x)


# ------------------------------------------------------------------ kernels


def _softplus_eps(x):
    return F.softplus(x) + EPS


def _shifted(x):
    return F.softplus(x) + 0.1


_TRANSFORMS = {"id": lambda x: x, "softplus": _softplus_eps, "shifted": _shifted,
               "sigmoid": torch.sigmoid}

#: Raw-parameter transforms of the generic scalar kernel families (spec 3.3), by parameter.
_GENERIC_TRANSFORMS = {
    "Cauchy": ("id", "softplus"), "Laplace": ("id", "softplus"), "Gumbel": ("id", "softplus"),
    "LogNormal": ("id", "softplus"), "StudentT": ("shifted", "id", "softplus"),
    "Exponential": ("softplus",), "Gamma": ("shifted", "softplus"), "Chi2": ("shifted",),
    "HalfCauchy": ("softplus",), "HalfNormal": ("softplus",),
    "InverseGamma": ("shifted", "softplus"), "Weibull": ("softplus", "softplus"),
    "Pareto": ("softplus", "softplus"), "Kumaraswamy": ("shifted", "shifted"),
    "ContinuousBernoulli": ("sigmoid",), "FisherSnedecor": ("shifted", "shifted"),
    "Poisson": ("softplus",), "Geometric": ("sigmoid",),
    "NegativeBinomial": ("shifted", "sigmoid"),
}
_SPECIAL_KERNELS = ("Normal", "LogitNormal", "Categorical", "Bernoulli", "Beta")
KERNEL_FAMILIES = frozenset(_GENERIC_TRANSFORMS) | frozenset(_SPECIAL_KERNELS)

# Every family the table marks "yes" as a kernel must be implemented (spec 3.3).
assert KERNEL_FAMILIES == {n for n, f in FAMILIES.items() if f.kernel == "yes"}, \
    "kernel families out of sync with qvr.sema.families"
assert all(len(t) == len(FAMILIES[n].params) for n, t in _GENERIC_TRANSFORMS.items())
assert {n for n, f in FAMILIES.items() if f.step == "yes"} <= INLINE_FAMILIES
# The checker refuses (QVR950) exactly the families this runtime lacks (E9.9).
from qvr.sema import runnable as _runnable  # noqa: E402
assert INLINE_FAMILIES == _runnable.STEP_FAMILIES - set(_runnable.SPACE_FAMILIES), \
    "inline families out of sync with qvr.sema.runnable"
assert KERNEL_FAMILIES == _runnable.KERNEL_FAMILIES


def kernel_supported(name: str) -> bool:
    return name in KERNEL_FAMILIES


def _inverse_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


class KernelFamily:
    """How a kernel of family `name` with codomain width `d` (or `k` classes) works.

    `n_raw` is the width P of the parameter source's output; `params(raw)` returns the
    family's parameters; `sample(params, sample_shape)` and `log_prob(params, y)` (summed
    over the codomain coordinates) use them.  `scale_block(s)` tells a kernel with option
    `scale=s` which raw block is the scale and which raw value gives scale `s`.
    """

    def __init__(self, name: str, width: int):
        self.name = name
        self.family = FAMILIES[name]
        self.d = width
        if name == "Categorical":
            self.n_raw = width
        elif name == "Bernoulli":
            self.n_raw = 1
        else:
            self.n_raw = len(self.family.params) * width
        self.discrete_output = self.family.discrete
        self.reparameterised = name in ("Normal", "LogitNormal", "Beta") or (
            name in _GENERIC_TRANSFORMS and name not in ("Poisson", "Geometric", "NegativeBinomial"))

    # -- initialisation of the scale block (spec 3.1, D1)
    def scale_block(self, s: float):
        """`(start, stop, raw_value)` of the raw scale block for output scale `s`, or None."""
        d = self.d
        if self.name in ("Normal", "LogitNormal"):
            return d, 2 * d, math.log(s)
        names = [p for p, _ in self.family.params]
        if self.name in _GENERIC_TRANSFORMS and "scale" in names:
            i = names.index("scale")
            return i * d, (i + 1) * d, _inverse_softplus(max(s - EPS, 1e-12))
        return None

    # -- raw -> parameters
    def params(self, raw: torch.Tensor):
        d, name = self.d, self.name
        if name in ("Normal", "LogitNormal"):
            # one chunk (one autograd node, whose backward is one concatenation) rather
            # than two slices (two zero-filled gradients and a sum); the same values
            loc, raw_scale = raw.chunk(2, -1)
            return loc, torch.exp(raw_scale).clamp(min=EPS)
        if name == "Categorical":
            return (raw,)
        if name == "Bernoulli":
            return (raw[..., 0],)
        if name == "Beta":
            return F.softplus(raw[..., :d]) + 0.1, F.softplus(raw[..., d:]) + 0.1
        tr = _GENERIC_TRANSFORMS[name]
        return tuple(_TRANSFORMS[t](raw[..., i * d:(i + 1) * d]) for i, t in enumerate(tr))

    def distribution(self, params) -> D.Distribution:
        name = self.name
        if name == "Normal":
            return D.Normal(*params, validate_args=False)
        if name == "LogitNormal":
            return D.TransformedDistribution(D.Normal(*params, validate_args=False),
                                             [D.SigmoidTransform()], validate_args=False)
        if name == "Categorical":
            return D.Categorical(logits=params[0], validate_args=False)
        if name == "Bernoulli":
            return D.Bernoulli(logits=params[0], validate_args=False)
        if name == "Beta":
            return D.Beta(*params, validate_args=False)
        kw = {p: v for (p, _), v in zip(self.family.params, params)}
        return _TORCH_BY_NAME[name](**kw, validate_args=False)

    # -- drawing and scoring
    def sample(self, params, sample_shape=torch.Size()) -> torch.Tensor:
        name = self.name
        if name == "Normal":
            loc, scale = params
            eps = torch.randn(tuple(sample_shape) + tuple(loc.shape), dtype=loc.dtype,
                              device=loc.device)
            return loc + scale * eps
        if name == "LogitNormal":
            mu, sigma = params
            eps = torch.randn(tuple(sample_shape) + tuple(mu.shape), dtype=mu.dtype,
                              device=mu.device)
            return torch.sigmoid(mu + sigma * eps)
        if name == "Categorical":
            return _categorical_sample(params[0], sample_shape)
        return draw(self.distribution(params), sample_shape)

    def log_prob(self, params, y: torch.Tensor, rows: Optional[torch.Tensor] = None
                 ) -> torch.Tensor:
        """log-density summed over the codomain coordinates (batch-shaped).

        `rows` (optional, int64 of `y`'s batch shape): the parameters were computed once
        per distinct input, with leading axes `(n, U)`, and batch position `r` of `y` uses
        `params[:, rows[r]]`; the result is `(n, *rows.shape)`.  For a Normal, the
        parts that do not depend on `y` (reciprocal scale, log-normaliser) are computed
        on the `n x U` parameters before gathering.
        """
        name = self.name
        if rows is not None:
            if name == "Normal":
                loc, scale = params
                log_norm = (torch.log(scale) + _LOG_SQRT_2PI).sum(-1)  # (n, U)
                z = (y - gather_rows(loc, rows)) * gather_rows(torch.reciprocal(scale), rows)
                return -0.5 * (z * z).sum(-1) - gather_rows(log_norm, rows)
            params = tuple(gather_rows(p, rows) for p in params)
        if name == "Normal":
            loc, scale = params
            z = (y - loc) / scale
            return (-0.5 * z * z - torch.log(scale) - _LOG_SQRT_2PI).sum(-1)
        if name == "LogitNormal":
            mu, sigma = params
            yc = y.clamp(EPS, 1 - EPS)
            z = (torch.log(yc) - torch.log1p(-yc) - mu) / sigma
            lp = -0.5 * z * z - torch.log(sigma) - _LOG_SQRT_2PI - torch.log(yc * (1 - yc))
            return lp.sum(-1)
        if name == "Categorical":
            logits = params[0]
            logp = torch.log_softmax(logits, dim=-1)
            y = y.long()
            if y.shape != logp.shape[:-1]:
                shape = torch.broadcast_shapes(y.shape, logp.shape[:-1])
                logp = logp.expand(*shape, logp.shape[-1])
                y = y.expand(shape)
            return logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        if name == "Bernoulli":
            return self.distribution(params).log_prob(y.to(params[0].dtype))
        dtype = params[0].dtype
        if name == "Beta":
            y = y.to(dtype).clamp(EPS, 1 - EPS)
        else:
            y = y.to(dtype)
        return self.distribution(params).log_prob(y).sum(-1)

    def support(self):
        name = self.name
        if name == "Normal":
            return constraints.real
        if name in ("LogitNormal", "Beta"):
            return constraints.unit_interval
        if name == "Categorical":
            return constraints.integer_interval(0, self.d - 1)
        if name == "Bernoulli":
            return constraints.boolean
        if name == "Pareto":  # the support depends on the (input-dependent) scale
            return constraints.positive
        cls = _TORCH_BY_NAME[name]
        sup = cls.support
        return sup if isinstance(sup, constraints.Constraint) else constraints.real


def gather_rows(p: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`p[:, rows]`: `p (n, U, ...)` and an int64 index `rows (*batch)` with values in
    `[0, U)` give `(n, *batch, ...)`."""
    flat = p.index_select(1, rows.reshape(-1))
    return flat.reshape(p.shape[0], *rows.shape, *p.shape[2:])


def _categorical_sample(logits: torch.Tensor, sample_shape=torch.Size()) -> torch.Tensor:
    """int64 draws from `Categorical(logits=...)` by the Gumbel-max trick (vectorised)."""
    shape = tuple(sample_shape) + tuple(logits.shape)
    u = torch.rand(shape, dtype=logits.dtype, device=logits.device).clamp(min=1e-20)
    gumbel = -torch.log((-torch.log(u)).clamp(min=1e-20))
    return torch.argmax(logits + gumbel, dim=-1)

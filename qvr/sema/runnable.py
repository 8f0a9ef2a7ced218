"""What this toolchain's runtime runs, known to the checker (torch-free).

Section 9 marks some families *opt* in a position: a runtime may omit them, and the spec
has the runtime report QVR950 when the program is compiled.  This toolchain has one
runtime, so the checker refuses exactly what it cannot run (docs/extensions.md E9.9, a
decision against section 9's "the checker never reports it"): `qvr check` and the editors
report QVR950 where such a family is used, and a program that checks clean runs.
`qvr.runtime.families` asserts that its tables match these sets.
"""
from __future__ import annotations

from qvr.sema.families import FAMILIES

#: families the runtime builds as `sample`/`observe` targets and in `log_density`
#: (every *yes* family plus the multivariate ones of E9.9)
STEP_FAMILIES = frozenset(
    {n for n, f in FAMILIES.items() if f.step == "yes"}
    | {"MultivariateNormal", "MultivariateNormalCov", "LowRankMVN", "LKJCholesky"})

#: families drawn only as a `sample` step with `over=` a constrained space whose values
#: they give (QVR439 elsewhere): the space fixes the size of the matrix
SPACE_FAMILIES = {"LKJCholesky": ("CorrCholesky", "CholeskyFactor")}

#: families the runtime builds as kernels (`~ F`): the *yes* ones
KERNEL_FAMILIES = frozenset(n for n, f in FAMILIES.items() if f.kernel == "yes")


#: families whose truncation `[lower=…, upper=…]` may have run-time arguments or bounds:
#: torch's `cdf` is differentiable in every argument (`qvr.runtime.constraints`); any other
#: family truncated with a variable argument or bound is QVR950 (E9.2)
CDF_FAMILIES = frozenset({"Normal", "Cauchy", "Laplace", "Gumbel", "LogNormal", "HalfNormal",
                          "HalfCauchy", "Exponential", "Uniform", "Weibull", "Pareto",
                          "Kumaraswamy", "LogitNormal", "ContinuousBernoulli"})


def step_supported(name: str) -> bool:
    return name in STEP_FAMILIES


def kernel_supported(name: str) -> bool:
    return name in KERNEL_FAMILIES

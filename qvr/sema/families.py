"""The built-in distribution families (qvr-language.md section 9) and builtin functions (8.3).

This table is the single source of truth for family names, parameter names and kinds,
supports, event ranks and where each family may be used.  The runtime reads it too.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    params: tuple[tuple[str, str], ...]  # (name, kind) with kind in real|pos|unit|vec|mat
    support: str  # hover name
    support_text: str
    discrete: bool
    event_rank: int
    step: str  # yes | opt | no
    kernel: str  # yes | opt | no
    kernel_cod: str  # continuous | discrete | bool

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(p for p, _ in self.params)})"


def _f(name, params, support_text, support, discrete, rank, step, kernel, cod="continuous"):
    ps = tuple(tuple(p.split(":")) for p in params.split()) if params else ()
    return Family(name, ps, support, support_text, discrete, rank, step, kernel, cod)


_REAL = ("real line", "Real")
_POS = ("positive reals", "Positive")
_UNIT = ("unit interval (0, 1)", "Unit")

FAMILIES: dict[str, Family] = {f.name: f for f in [
    _f("Normal", "loc:real scale:pos", *_REAL, False, 0, "yes", "yes"),
    _f("Cauchy", "loc:real scale:pos", *_REAL, False, 0, "yes", "yes"),
    _f("Laplace", "loc:real scale:pos", *_REAL, False, 0, "yes", "yes"),
    _f("Gumbel", "loc:real scale:pos", *_REAL, False, 0, "yes", "yes"),
    _f("StudentT", "df:pos loc:real scale:pos", *_REAL, False, 0, "yes", "yes"),
    _f("LogNormal", "loc:real scale:pos", *_POS, False, 0, "yes", "yes"),
    _f("HalfNormal", "scale:pos", *_POS, False, 0, "yes", "yes"),
    _f("HalfCauchy", "scale:pos", *_POS, False, 0, "yes", "yes"),
    _f("Exponential", "rate:pos", *_POS, False, 0, "yes", "yes"),
    _f("Gamma", "concentration:pos rate:pos", *_POS, False, 0, "yes", "yes"),
    _f("InverseGamma", "concentration:pos rate:pos", *_POS, False, 0, "yes", "yes"),
    _f("Chi2", "df:pos", *_POS, False, 0, "yes", "yes"),
    _f("Weibull", "scale:pos concentration:pos", *_POS, False, 0, "yes", "yes"),
    _f("Pareto", "scale:pos alpha:pos", "reals ≥ scale", "Positive", False, 0, "yes", "yes"),
    _f("FisherSnedecor", "df1:pos df2:pos", *_POS, False, 0, "yes", "yes"),
    _f("Uniform", "low:real high:real", "interval [low, high]", "Interval", False, 0, "yes", "opt"),
    _f("TruncatedNormal", "mu:real sigma:pos low:real high:real", "interval [low, high]", "Interval", False, 0, "yes", "opt"),
    _f("Beta", "concentration1:pos concentration0:pos", *_UNIT, False, 0, "yes", "yes"),
    _f("Kumaraswamy", "concentration1:pos concentration0:pos", *_UNIT, False, 0, "yes", "yes"),
    _f("LogitNormal", "mu:real sigma:pos", *_UNIT, False, 0, "yes", "yes"),
    _f("ContinuousBernoulli", "probs:unit", "unit interval [0, 1]", "Unit", False, 0, "yes", "yes"),
    _f("Categorical", "probs:vec", "class index in {0, …, K−1}", "Index", True, 0, "yes", "yes", "discrete"),
    _f("Bernoulli", "probs:unit", "{0, 1}", "Bool", True, 0, "yes", "yes", "bool"),
    _f("Poisson", "rate:pos", "non-negative integers", "Count", True, 0, "yes", "yes"),
    _f("NegativeBinomial", "total_count:pos probs:unit", "non-negative integers", "Count", True, 0, "yes", "yes"),
    _f("Geometric", "probs:unit", "non-negative integers", "Count", True, 0, "yes", "yes"),
    _f("Dirichlet", "concentration:pos", "probability simplex", "Simplex", False, 1, "yes", "opt"),
    _f("OneHotCategorical", "probs:vec", "one-hot vectors", "OneHot", True, 1, "opt", "opt"),
    _f("RelaxedBernoulli", "temperature:pos probs:unit", *_UNIT, False, 0, "opt", "opt"),
    _f("RelaxedOneHotCategorical", "temperature:pos probs:vec", "probability simplex", "Simplex", False, 1, "opt", "opt"),
    _f("LogisticNormal", "loc:real scale:pos", "probability simplex", "Simplex", False, 1, "opt", "opt"),
    _f("MultivariateNormal", "loc:real scale_tril:mat", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("LowRankMVN", "loc:real cov_factor:mat cov_diag:pos", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("GP", "length_scale:pos amplitude:pos", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("Horseshoe", "scale:pos", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("Wishart", "df:pos scale_tril:mat", "positive-definite matrices", "PosDef", False, 2, "opt", "opt"),
    _f("InverseWishart", "df:pos scale_tril:mat", "positive-definite matrices", "PosDef", False, 2, "opt", "opt"),
    _f("MatrixNormal", "loc:real row_scale:pos col_scale:pos", "real matrices", "Matrix", False, 2, "opt", "opt"),
    _f("LKJCholesky", "concentration:pos", "Cholesky factors of correlation matrices", "CorrCholesky", False, 2, "opt", "opt"),
    _f("Flow", "", "real vectors", "Vector", False, 0, "no", "opt"),
]}

# Families of the reference dialect outside the core, with their parameter counts.
OUTSIDE_CORE_FAMILIES = {"Binomial": 1, "VonMises": 2, "GeneralizedPareto": 3}

# Morphism roles (5.2; `attention` from docs/extensions.md E2), in the order messages list them.
ROLES = ("latent", "observed", "kernel", "embed", "discretize", "let", "attention")
# The families an attention layer may draw from (docs/extensions.md E2): location-scale
# families whose loc is the attention output and whose scale is a learned vector.
ATTENTION_FAMILIES = ("Normal", "Laplace", "Cauchy")

LOCATION_SCALE = {"Normal", "LogitNormal", "Cauchy", "Laplace", "Gumbel", "StudentT", "LogNormal"}


@dataclass(frozen=True, slots=True)
class Builtin:
    name: str
    params: tuple[str, ...]
    kinds: str  # e.g. "numeric -> numeric"
    doc: str

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.params)})"


BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Builtin("exp", ("x",), "numeric -> numeric", "elementwise exponential"),
    Builtin("log", ("x",), "numeric -> numeric", "elementwise natural logarithm"),
    Builtin("sqrt", ("x",), "numeric -> numeric", "elementwise square root"),
    Builtin("sigmoid", ("x",), "numeric -> numeric", "elementwise logistic function 1/(1+e^-x)"),
    Builtin("parse", ("d", "input"), "deduction, any -> chart", "run deduction d on input"),
    Builtin("compose", ("d1", "d2"), "deduction, deduction -> deduction",
            "a deduction whose axioms are d1's goal items plus d2's own axioms"),
]}

OUTSIDE_CORE_BUILTINS = frozenset("""relu relu6 leaky_relu prelu rrelu elu selu celu gelu silu swish
mish hardtanh hardshrink hardsigmoid hardswish softplus softshrink softsign softmax log_softmax
softmin tanh tanhshrink logsigmoid threshold glu normalize expm1 log1p log2 log10 rsqrt square abs
neg sign reciprocal clamp sin cos tan asin acos atan sinh cosh asinh acosh atanh floor ceil round
trunc erf erfc erfinv lgamma digamma sum mean var std min max argmin argmax prod amax amin
logsumexp norm cumsum cumprod cummax cummin flip sort dropout alpha_dropout layer_norm rms_norm
length map filter fold logsumexp_over cholesky_quad_form subst""".split())

CHART_METHODS = {"goal_weight": 0}
OUTSIDE_CORE_CHART_METHODS = frozenset({"weight", "try_weight", "enumerate", "embedding", "derivations"})

COMPOSITION_RULES = {
    **{r: "algebra" for r in (
        "product_fuzzy", "boolean", "lukasiewicz", "godel", "tropical", "max_plus", "log_prob",
        "real", "probability", "counting", "markov", "reichenbach", "boolean_dual",
        "dual_lukasiewicz", "dual_godel")},
    "material_impl": "semigroupoid",
}
COMPOSITION_LEVELS = ("algebra", "semigroupoid", "bilinear_form", "rule")
RUNTIME_RULES = frozenset({"product_fuzzy", "real", "log_prob", "markov"})
SEMIRINGS = ("LogProb", "Viterbi", "Boolean", "Counting")

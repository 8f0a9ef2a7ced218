"""The built-in distribution families (qvr-language.md section 9) and builtin functions (8.3).

This table is the single source of truth for family names, parameter names and kinds,
supports, event ranks and where each family may be used.  The runtime reads it too.
"""
from __future__ import annotations

from dataclasses import dataclass

from qvr.sema.types import Real as _Real, strip as _strip


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
    # E9.2: an improper prior (`Flat`, `HalfFlat`): no parameters, written without
    # parentheses, a `sample` step target only (QVR426 elsewhere)
    improper: bool = False

    @property
    def signature(self) -> str:
        if self.improper:  # E9.2: written without parentheses
            return self.name
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
    # E9.9: the covariance form (Stan's multi_normal)
    _f("MultivariateNormalCov", "loc:real covariance_matrix:mat", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("LowRankMVN", "loc:real cov_factor:mat cov_diag:pos", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("GP", "length_scale:pos amplitude:pos", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("Horseshoe", "scale:pos", "real vectors", "Vector", False, 1, "opt", "opt"),
    _f("Wishart", "df:pos scale_tril:mat", "positive-definite matrices", "PosDef", False, 2, "opt", "opt"),
    _f("InverseWishart", "df:pos scale_tril:mat", "positive-definite matrices", "PosDef", False, 2, "opt", "opt"),
    _f("MatrixNormal", "loc:real row_scale:pos col_scale:pos", "real matrices", "Matrix", False, 2, "opt", "opt"),
    _f("LKJCholesky", "concentration:pos", "Cholesky factors of correlation matrices", "CorrCholesky", False, 2, "opt", "opt"),
    _f("Flow", "", "real vectors", "Vector", False, 0, "no", "opt"),
    # extension E9.2 (docs/extensions.md): improper flat priors, `sample` steps only
    Family("Flat", (), "Real", "real line (improper flat prior)", False, 0, "yes", "no",
           "continuous", True),
    Family("HalfFlat", (), "Positive", "positive reals (improper flat prior)", False, 0, "yes",
           "no", "continuous", True),
]}


# ---------------------------------------------------------------- E9.2 constrained spaces
# `object Mu : Ordered 2` … names a constrained vector space, used with `over=` on a
# sample step (docs/extensions.md E9.2).  The resolved type is a `Space`: a `Real n` atom
# (n the number of coordinates of a value: K for vectors, K*K for a Cholesky factor) that
# also knows its constructor; it is a `Real` for every structural rule, so a space only
# differs where the checker asks for one.

@dataclass(frozen=True, slots=True)
class SpaceKind:
    name: str  # the constructor as written (`Ordered`)
    text: str  # hover: "{n}" is the size
    support: str  # the support its draws need: Real | Positive | Simplex | CorrCholesky
    families: tuple  # the families that may draw it (empty: any family of that support)
    matrix: bool = False  # values are n×n matrices

    def describe(self, n: int) -> str:
        return self.text.format(n=n)


SPACES: dict[str, SpaceKind] = {s.name: s for s in [
    SpaceKind("Ordered", "ordered vectors of length {n}", "Real", ()),
    SpaceKind("PositiveOrdered", "positive ordered vectors of length {n}", "Positive", ()),
    SpaceKind("Simplex", "probability vectors of length {n}", "Simplex",
              ("Flat", "Dirichlet")),
    SpaceKind("CholeskyFactor", "Cholesky factors of {n}×{n} correlation matrices",
              "CorrCholesky", ("Flat", "LKJCholesky"), matrix=True),
    # E9.9: the same space under the support name of `LKJCholesky` (section 9)
    SpaceKind("CorrCholesky", "Cholesky factors of {n}×{n} correlation matrices",
              "CorrCholesky", ("Flat", "LKJCholesky"), matrix=True),
]}
# constructors of section 15 that stay outside the core (QVR900)
OUTSIDE_CORE_SPACES = frozenset({"Sphere", "Ball", "Covariance", "Correlation", "Orthogonal",
                                 "Stiefel", "LowerTriangular", "Diagonal"})


@dataclass(frozen=True, slots=True)
class Space(_Real):
    """A constrained space `Ordered K`, … : a `Real` atom of `n` coordinates."""

    kind: str = ""
    size: int = 0  # K as written (`CholeskyFactor 3`: size 3, n = 9)

    @property
    def space(self) -> SpaceKind:
        return SPACES[self.kind]

    @property
    def spelling(self) -> str:
        return f"{self.kind} {self.size}"


def space_of(t):
    """The `Space` behind a resolved type (through object names), or None."""
    s = _strip(t)
    return s if isinstance(s, Space) else None

# Families of the reference dialect outside the core, with their parameter counts.
OUTSIDE_CORE_FAMILIES = {"Binomial": 1, "VonMises": 2, "GeneralizedPareto": 3}

# Morphism roles (5.2; `attention` from docs/extensions.md E2), in the order messages list them.
ROLES = ("latent", "observed", "kernel", "embed", "discretize", "let", "attention", "pretrained")
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
    # E9.1: optional trailing parameters (`sum(x, axis?)`); arity is len(params) up to
    # len(params) + len(optional)
    optional: tuple[str, ...] = ()

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.params + tuple(p + '?' for p in self.optional))})"

    @property
    def all_params(self) -> tuple[str, ...]:
        """Every parameter name, required then optional."""
        return self.params + self.optional

    def accepts(self, n: int) -> bool:
        """Whether `n` arguments is a valid arity."""
        return len(self.params) <= n <= len(self.params) + len(self.optional)


BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Builtin("exp", ("x",), "numeric -> numeric", "elementwise exponential"),
    Builtin("log", ("x",), "numeric -> numeric", "elementwise natural logarithm"),
    Builtin("sqrt", ("x",), "numeric -> numeric", "elementwise square root"),
    Builtin("sigmoid", ("x",), "numeric -> numeric", "elementwise logistic function 1/(1+e^-x)"),
    Builtin("parse", ("d", "input"), "deduction, any -> chart", "run deduction d on input"),
    Builtin("compose", ("d1", "d2"), "deduction, deduction -> deduction",
            "a deduction whose axioms are d1's goal items plus d2's own axioms"),
    # E9.3 recurrences and ODE solutions (docs/e9/recurrence.md)
    Builtin("fold", ("O", "init", "f"), "object, numeric, lambda (s, t) -> numeric",
            "the last state of the recurrence s[0] = init, s[t] = f(s[t-1], t) over O"),
    Builtin("scan", ("O", "init", "f"), "object, numeric, lambda (s, t) -> numeric",
            "every state of the recurrence s[0] = init, s[t] = f(s[t-1], t), stacked along O"),
    Builtin("ode", ("f", "y0", "times"),
            "lambda (y, t), numeric, numeric -> numeric",
            "y at each of times, solving dy/dt = f(y, t), y(times[0]) = y0 (Dormand-Prince); "
            "ode(f, y0, t0, times) starts from y(t0) = y0",
            optional=("rtol", "atol")),
]}

# ---------------------------------------------------------------- E9.1 builtins
# (docs/e9/letexpr.md) elementwise functions, reductions, linear algebra, `slice` and
# `log_density`; one-line docs (completion and signature help show them).

_E9_UNARY_DOCS = {
    "abs": "elementwise absolute value", "softplus": "elementwise log(1 + e^x)",
    "log1p": "elementwise log(1 + x)", "expm1": "elementwise e^x - 1",
    "tanh": "elementwise hyperbolic tangent", "lgamma": "elementwise log of the gamma function",
    "digamma": "elementwise derivative of lgamma", "logsigmoid": "elementwise log(sigmoid(x))",
    "square": "elementwise x * x", "erf": "elementwise error function",
    "erfc": "elementwise complementary error function 1 - erf(x)",
    "log2": "elementwise base-2 logarithm", "log10": "elementwise base-10 logarithm",
    "sin": "elementwise sine", "cos": "elementwise cosine", "tan": "elementwise tangent",
    "asin": "elementwise inverse sine", "acos": "elementwise inverse cosine",
    "atan": "elementwise inverse tangent", "sinh": "elementwise hyperbolic sine",
    "cosh": "elementwise hyperbolic cosine", "asinh": "elementwise inverse hyperbolic sine",
    "acosh": "elementwise inverse hyperbolic cosine",
    "atanh": "elementwise inverse hyperbolic tangent", "floor": "elementwise round down",
    "ceil": "elementwise round up", "round": "elementwise round to nearest (ties to even)",
    "trunc": "elementwise round toward zero", "sign": "elementwise sign: -1, 0 or 1",
    "reciprocal": "elementwise 1 / x", "rsqrt": "elementwise 1 / sqrt(x)",
    "relu": "elementwise max(x, 0)",
}
_E9_REDUCTION_DOCS = {
    "sum": "sum over the last axis, or over the axis typed O",
    "mean": "mean over the last axis, or over the axis typed O",
    "max": "maximum over the last axis or the axis typed O; max(a, b) is elementwise",
    "min": "minimum over the last axis or the axis typed O; min(a, b) is elementwise",
    "prod": "product over the last axis, or over the axis typed O",
    "logsumexp": "log of the sum of exponentials over the last axis, or over the axis typed O",
    "var": "sample variance (n - 1 denominator) over the last axis, or over the axis typed O",
    "std": "sample standard deviation (n - 1) over the last axis, or over the axis typed O",
}
BUILTINS.update({b.name: b for b in [
    *[Builtin(n, ("x",), "numeric -> numeric", d) for n, d in _E9_UNARY_DOCS.items()],
    Builtin("pow", ("x", "p"), "numeric, numeric -> numeric", "elementwise x to the power p"),
    Builtin("clamp", ("x", "low", "high"), "numeric, numeric, numeric -> numeric",
            "elementwise x limited to [low, high]"),
    Builtin("softmax", ("x",), "numeric, object? -> numeric",
            "exp(x) normalised to sum 1 over the last axis, or over the axis typed O", ("axis",)),
    Builtin("log_softmax", ("x",), "numeric, object? -> numeric",
            "log of softmax over the last axis, or over the axis typed O", ("axis",)),
    *[Builtin(n, ("x",), "numeric, object? -> numeric", d, ("axis",))
      for n, d in _E9_REDUCTION_DOCS.items()],
    Builtin("cumsum", ("x",), "numeric, object? -> numeric",
            "running sum along the last axis, or along the axis typed O", ("axis",)),
    Builtin("cholesky", ("A",), "numeric -> numeric",
            "lower Cholesky factor L of a positive-definite matrix A = L Lᵀ"),
    Builtin("tri_solve", ("L", "b"), "numeric, numeric -> numeric",
            "x solving L x = b, L lower triangular (b a vector or a matrix)"),
    Builtin("logdet", ("A",), "numeric -> numeric", "log-determinant of a square matrix A"),
    Builtin("diag", ("v",), "numeric -> numeric", "the square matrix with v on its diagonal"),
    # E9.9: Stan's spelling of diag(v) @ A (scales for a correlation's Cholesky factor)
    Builtin("diag_pre_multiply", ("v", "A"), "numeric, numeric -> numeric",
            "diag(v) @ A: row i of the matrix A times v[i] (Stan's diag_pre_multiply)"),
    Builtin("eye", ("O",), "object -> numeric", "the identity matrix over object O"),
    Builtin("transpose", ("A",), "numeric -> numeric", "A with its last two axes swapped"),
    Builtin("slice", ("x", "start"), "numeric, integer, integer? -> numeric",
            "x[start:stop] along its first axis (Python semantics; integer literals or data)",
            ("stop",)),
    Builtin("log_density", ("F", "x"), "family call, numeric -> numeric",
            "elementwise log-density of family call F (e.g. Normal(mu, s)) at x"),
    Builtin("append_row", ("a", "b"), "numeric, numeric -> numeric",
            "a and b joined along their first axis (Stan's append_row; a scalar is one entry)"),
    Builtin("append_col", ("a", "b"), "numeric, numeric -> numeric",
            "a and b joined along their last axis (Stan's append_col; a scalar is one entry)"),
]})

# E9.10: conditionals and indicators (0/1 values, Stan's `step`, `int_step`)
BUILTINS.update({b.name: b for b in [
    Builtin("where", ("c", "a", "b"), "numeric, numeric, numeric -> numeric",
            "elementwise a where c is not 0, else b (Stan's c ? a : b); gradients reach the "
            "branch chosen"),
    Builtin("step", ("x",), "numeric -> numeric", "elementwise 1 if x >= 0, else 0 (Stan's step)"),
    Builtin("int_step", ("x",), "numeric -> numeric", "elementwise 1 if x > 0, else 0 (Stan's int_step)"),
]})

OUTSIDE_CORE_BUILTINS = frozenset("""relu relu6 leaky_relu prelu rrelu elu selu celu gelu silu swish
mish hardtanh hardshrink hardsigmoid hardswish softplus softshrink softsign softmax log_softmax
softmin tanh tanhshrink logsigmoid threshold glu normalize expm1 log1p log2 log10 rsqrt square abs
neg sign reciprocal clamp sin cos tan asin acos atan sinh cosh asinh acosh atanh floor ceil round
trunc erf erfc erfinv lgamma digamma sum mean var std min max argmin argmax prod amax amin
logsumexp norm cumsum cumprod cummax cummin flip sort dropout alpha_dropout layer_norm rms_norm
length map filter logsumexp_over cholesky_quad_form subst""".split()) - frozenset(BUILTINS)  # E9: builtins now in the table

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

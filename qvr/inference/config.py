"""`FitConfig`: every option of a fit, with its default, its help text and its validation.

This is the one place where fit options are declared.  The command line (`qvr run`), the
dashboard's setup form and `fit()` all read it: the options a method takes, their
defaults, their help and the checks of their values come from the field metadata below,
so they cannot drift apart.  It imports nothing heavy (no torch, no numpy), so the
dashboard's UI process can validate a form with it.

Each field's metadata (`Opt`) says

* ``methods`` — the methods the option belongs to (``ALL`` for common options);
* ``help`` — one line for ``--help`` and the dashboard;
* ``flag`` — the command-line flag (default ``--field-name``), or ``None`` for options
  that are not on the command line;
* ``parse`` — text → value (the command line and the dashboard's text inputs), raising
  `ValueError` with a message;
* ``check`` — value → error message or None (on top of the type checks);
* ``repeat`` / ``gather`` — a list option given once per value on the command line, and
  for one whose value is not that list (``args``, a mapping), the function that makes the
  field's value of the parsed values (raising `ValueError` with a message).

``args`` are the parameters of a parametric program (a template, language spec §7.13)
when the export fitted is one: ``{name: number}``, ``--arg NAME=VALUE`` once per
parameter on the command line, a row per parameter in the dashboard.  Which names are
needed is known only with the program: `qvr.inference.front.fitting.args_error` checks them.

`FitConfig.errors()` gives every problem as ``{field: message}`` (the dashboard shows them
in place); `FitConfig.validate()` raises `ConfigError` listing them; `FitConfig.from_dict`
rejects unknown keys by name.

Example::

    >>> cfg = FitConfig(method="svi", steps=200)
    >>> cfg.errors()
    {}
    >>> FitConfig(method="nuts", num_chains=0).errors()
    {'num_chains': 'must be an integer >= 1, got 0'}
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

METHODS = ("svi", "hmc", "nuts", "smc", "prior", "pathfinder")
MCMC = frozenset({"hmc", "nuts"})
ALL = frozenset(METHODS)
PATHFINDER = frozenset({"pathfinder"})
#: the methods that read the data (``prior`` draws the prior predictive and sets it
#: against the data: it reads the data too, and fits nothing)
FITTING = frozenset({"svi", "hmc", "nuts", "prior", "pathfinder"})
START_AT = ("means", "draws")
DTYPES = ("float32", "float64")
CHAIN_METHODS = ("vectorized", "sequential", "parallel", "distributed")


class ConfigError(ValueError):
    """Invalid fit options; `errors` maps each offending field to its message."""

    def __init__(self, errors: dict[str, str]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.errors.items()))


# ---------------------------------------------------------------- value parsers


def _int_at_least(low: int) -> Callable[[Any], Optional[str]]:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            return f"must be an integer >= {low}, got {v!r}"
        return None
    return check


def _text(v) -> Optional[str]:
    return None if isinstance(v, str) else f"must be text, got {v!r}"


def _positive_number(v) -> Optional[str]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v \
            or v == float("inf"):
        return f"must be a positive number, got {v!r}"
    return None


def _non_negative_number(v) -> Optional[str]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        return f"must be a number >= 0, got {v!r}"
    return None


def _threads_or_none(v) -> Optional[str]:
    return None if v is None else _int_at_least(1)(v)


def _unit_interval_or_none(zero: bool) -> Callable[[Any], Optional[str]]:
    """None, or a number in (0, 1) — [0, 1) when `zero` is allowed."""
    low, ok = ("[", (lambda v: 0 <= v < 1)) if zero else ("(", (lambda v: 0 < v < 1))

    def check(v):
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(v):
            return f"must be a number in {low}0, 1), got {v!r}"
        return None
    return check


_probability_or_none = _unit_interval_or_none(zero=False)
_jitter_or_none = _unit_interval_or_none(zero=True)


def _choice(*choices, optional=False) -> Callable[[Any], Optional[str]]:
    def check(v):
        if (v is None and optional) or v in choices:
            return None
        return f"must be one of {', '.join(map(str, choices))}; got {v!r}"
    return check


def _int_or_none_at_least(low: int):
    inner = _int_at_least(low)
    return lambda v: None if v is None else inner(v)


def _token_patterns(v) -> Optional[str]:
    if not isinstance(v, (list, tuple)):
        return f"must be a list of token patterns, got {v!r}"
    for p in v:
        if not isinstance(p, (list, tuple)) or not p or not all(_is_token(t) for t in p):
            return (f"each pattern must be a non-empty list of token ids >= 0 or words, "
                    f"got {p!r}")
    return None


def _is_token(t) -> bool:
    """A token of a constraint: an id >= 0, or a word of the program's vocabulary
    (resolved when the fit starts, `qvr.inference.methods.smc.resolve_tokens`)."""
    if isinstance(t, str):
        return bool(t)
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0


def _requirements(v) -> Optional[str]:
    if not isinstance(v, (list, tuple)):
        return f"must be a list of [token, within] pairs, got {v!r}"
    for r in v:
        if not (isinstance(r, (list, tuple)) and len(r) == 2 and _is_token(r[0])
                and isinstance(r[1], int) and not isinstance(r[1], bool) and r[1] >= 1):
            return (f"each requirement must be [token id >= 0 or word, within >= 1], "
                    f"got {r!r}")
    return None


def parse_int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def parse_float(text: str) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def parse_optional(inner: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str):
        t = str(text).strip()
        return None if t in ("", "none", "None", "default") else inner(t)
    return parse


def _parse_token(text: str):
    """An id (``8``) or a word of the vocabulary (``dog``), kept as text until the fit
    resolves it against the program's vocabulary."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        n = int(t)
        if n < 0:
            raise ValueError(f"token ids are >= 0, got {text!r}")
        return n
    return t


def parse_arg_value(text: str) -> float:
    """A parametric program's argument: a finite number (its parameters are `Real`)."""
    t = str(text).strip()
    value = parse_float(t)
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {t!r}")
    return value


def parse_arg(text: str) -> list:
    """``NAME=VALUE`` (``spread=2.0``): a parametric program's parameter and its number,
    as ``[name, value]`` (`gather_args` makes the mapping of them)."""
    name, sep, value = str(text).partition("=")
    name = name.strip()
    if not sep or not name or any(c.isspace() for c in name):
        raise ValueError(f"expected NAME=VALUE (e.g. spread=2.0), got {text!r}")
    try:
        return [name, parse_arg_value(value)]
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def gather_args(pairs) -> dict:
    """``{name: value}`` of the parsed ``--arg`` values; a name given twice is an error."""
    out: dict = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"`{name}` is given twice ({out[name]:g} and {value:g})")
        out[name] = value
    return out


def parse_size(text: str) -> list:
    """``NAME=SIZE`` (``N=100``): a size read from the data (`object Child : FinSet N`),
    given on the command line, as ``[name, rows]``."""
    name, sep, value = str(text).partition("=")
    name = name.strip()
    if not sep or not name or any(c.isspace() for c in name):
        raise ValueError(f"expected NAME=SIZE (e.g. N=100), got {text!r}")
    try:
        n = parse_int(value)
    except ValueError:
        raise ValueError(f"{name}: expected a whole number, got {value.strip()!r}") from None
    if n < 1:
        raise ValueError(f"{name}: must be at least 1, got {n}")
    return [name, n]


#: what becomes of a fitted guide's draws (`--resample`, `FitConfig.resample`): kept
#: (``none``), resampled by Pareto-smoothed importance weights (``psis``,
#: `qvr.inference.methods.guide_resample`), or by adaptive importance sampling from the
#: Laplace or Pathfinder approximation (``amis``, `qvr.inference.methods.guide_amis`)
RESAMPLES = ("none", "psis", "amis")

#: the SVI guide families (`--guide`); ``lowrank`` takes its rank as ``lowrank:K``
GUIDES = ("meanfield", "fullrank", "lowrank", "flow", "map", "laplace")


def split_guide(text: str) -> tuple:
    """``"lowrank:8"`` -> ``("lowrank", 8)``; ``"fullrank"`` -> ``("fullrank", None)``
    (``lowrank`` alone: rank None, chosen from the latent dimension).  Raises
    `ValueError` naming the families for anything else."""
    t = str(text).strip().lower()
    name, sep, rank = t.partition(":")
    name = name.strip()
    if name not in GUIDES:
        raise ValueError(f"unknown guide {text!r}; expected one of "
                         f"{', '.join(g + (':K' if g == 'lowrank' else '') for g in GUIDES)}")
    if not sep:
        return name, None
    if name != "lowrank":
        raise ValueError(f"only the lowrank guide takes a rank (lowrank:K), got {text!r}")
    try:
        k = int(rank.strip())
    except ValueError:
        raise ValueError(f"lowrank:K needs a whole number K >= 1, got {text!r}") from None
    if k < 1:
        raise ValueError(f"lowrank:K needs a whole number K >= 1, got {text!r}")
    return name, k


def parse_guide(text: str) -> str:
    """The canonical spelling of a guide (``" LowRank:8 "`` -> ``"lowrank:8"``)."""
    name, rank = split_guide(text)
    return name if rank is None else f"{name}:{rank}"


def _guide(v) -> Optional[str]:
    if not isinstance(v, str):
        return f"must be a guide name, got {v!r}"
    try:
        split_guide(v)
    except ValueError as exc:
        return str(exc)
    return None


def _sizes(v) -> Optional[str]:
    if not isinstance(v, dict):
        return f"must be a mapping of size names to whole numbers, got {v!r}"
    for k, x in v.items():
        if not isinstance(k, str) or not k:
            return f"size names must be non-empty text, got {k!r}"
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            return f"{k}: must be a whole number of at least 1, got {x!r}"
    return None


def _template_args(v) -> Optional[str]:
    if not isinstance(v, dict):
        return f"must be a mapping of parameter names to numbers, got {v!r}"
    for k, x in v.items():
        if not isinstance(k, str) or not k:
            return f"parameter names must be non-empty text, got {k!r}"
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            return f"{k}: must be a finite number, got {x!r}"
    return None


def parse_pattern(text: str) -> list:
    """``3``, ``dog``, or a run ``3,4,5`` / ``the,dog`` (token ids or vocabulary words)."""
    parts = [t for t in str(text).replace(" ", "").split(",") if t]
    if not parts:
        raise ValueError(f"expected a token (id or word) or a run TOKEN,TOKEN,..., got {text!r}")
    return [_parse_token(t) for t in parts]


def parse_requirement(text: str) -> list:
    """``TOKEN@N``: the token (id or vocabulary word) among the first N."""
    tok, sep, within = str(text).rpartition("@")
    if not sep or not tok.strip():
        raise ValueError(f"expected TOKEN@N, got {text!r}")
    return [_parse_token(tok), parse_int(within)]


@dataclass(frozen=True)
class Opt:
    """Field metadata of a `FitConfig` option (see the module docstring)."""

    methods: frozenset = ALL
    help: str = ""
    flag: Optional[str] = ""  # "" = derived from the name; None = not on the command line
    parse: Callable[[str], Any] = str
    check: Optional[Callable[[Any], Optional[str]]] = None
    metavar: Optional[str] = None
    choices: Optional[tuple] = None
    repeat: bool = False  # a list option given once per value on the command line
    gather: Optional[Callable[[list], Any]] = None  # repeat: parsed values -> field value


def _opt(default, **meta):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"opt": Opt(**meta)})
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"opt": Opt(**meta)})
    return field(default=default, metadata={"opt": Opt(**meta)})


@dataclass
class FitConfig:
    """Options of a fit; every field has a default.  See the module docstring.

    Common: ``method`` (``svi``, ``hmc``, ``nuts``, ``smc``, ``prior``, ``pathfinder``), ``seed`` (`torch.manual_seed`
    before fitting; None leaves the RNG alone), ``device``, ``dtype`` (``float32`` or
    ``float64``: the whole fit runs with that default dtype, `qvr.inference.front.fitting.fit`),
    ``args`` (a parametric
    program's parameters, ``{name: number}``), ``progress_interval``.
    SVI, HMC and NUTS: ``data``, ``synthetic``, ``draws`` (Monte-Carlo draws of every
    composite's density).  SVI: ``steps``, ``lr``, ``elbo_particles``, ``batch_size``
    (`qvr.inference.data.minibatch`), ``resample`` (``psis``: the run's draws resampled from
    guide draws by their Pareto-smoothed importance weights when k-hat < 0.7,
    `qvr.inference.methods.guide_resample`; ``amis``: by adaptive importance sampling from
    the Laplace approximation (``--guide laplace``) or Pathfinder's,
    `qvr.inference.methods.guide_amis`; Pathfinder resamples its own draws by PSIS
    always, so it takes ``amis`` only).  HMC/NUTS: ``num_warmup``, ``num_samples``,
    ``num_chains``, ``step_size``, ``num_steps`` (HMC), ``max_tree_depth`` and ``uturn`` (NUTS),
    ``step_jitter``, ``target_accept``, ``mass_matrix``, ``adapt``, ``init_strategy``,
    ``chain_method``.  Every
    method: ``threads`` (`qvr.inference.threads`).  SVI, HMC and
    NUTS started from a run (``start_from``): ``start_at`` (`start_at_error`).
    SMC: ``particles``, ``expansion``, ``max_len``, ``eos``, ``bos``, ``forbid``,
    ``require``, ``min_len``, ``cache``, ``top``, ``lm``, ``lm_dtype``, ``prompt``,
    ``forbid_letters``, ``max_word_len``, ``template`` (`qvr.inference.methods.smc_lm`).
    Pathfinder (`qvr.inference.vi.pathfinder`):
    ``paths``, ``path_draws``, ``psis_draws``, ``history``, ``lbfgs_iters``,
    ``elbo_draws``.
    """

    method: str = _opt("nuts", flag=None, check=_choice(*METHODS),
                       help="inference method: svi, hmc, nuts, pathfinder or smc; prior "
                            "draws the prior predictive (no fit) and checks it against the "
                            "data")
    seed: Optional[int] = _opt(0, parse=parse_optional(parse_int),
                               check=lambda v: None if v is None or (
                                   isinstance(v, int) and not isinstance(v, bool)) else
                               f"must be an integer, got {v!r}",
                               metavar="N", help="random seed")
    device: str = _opt("cpu", choices=("cpu", "cuda"), check=_choice("cpu", "cuda"),
                       help="where to fit")
    dtype: str = _opt("float32", choices=DTYPES, check=_choice(*DTYPES),
                      help="precision of the whole fit (parameters, data, draws)")
    args: dict = _opt({}, flag="--arg", parse=parse_arg, gather=gather_args, repeat=True,
                      check=_template_args, metavar="NAME=VALUE",
                      help="a parameter of the parametric program fitted (a template: "
                           "`program p(spread : Real)`), e.g. --arg spread=2.0; once per "
                           "parameter")
    sizes: dict = _opt({}, flag="--size", parse=parse_size, gather=gather_args, repeat=True,
                       check=_sizes, metavar="NAME=SIZE",
                       help="a size the program reads from the data (`object Child : FinSet "
                            "N`), e.g. --size N=100: needed for synthetic data, checked "
                            "against the data otherwise; once per size")
    # ---- data (SVI, HMC, NUTS)
    data: Optional[str] = _opt(None, methods=FITTING, parse=parse_optional(str), metavar="FILE",
                               check=lambda v: None if v is None or isinstance(v, str) else
                               f"must be a file path, got {v!r}",
                               help="observed data and host data (.json, .npz or .pt; the key "
                                    "x is the program input, or host data x when the "
                                    "program reads a covariate x: then @input is the "
                                    "input); default: the data shipped beside the program "
                                    "(data/NAME.json)")
    synthetic: Optional[int] = _opt(None, methods=FITTING, parse=parse_optional(parse_int),
                                    check=_int_or_none_at_least(1), metavar="N",
                                    help="fit N rows drawn from the program's prior "
                                         "predictive instead of data (the drawn latents are "
                                         "kept as the ground truth)")
    draws: Optional[int] = _opt(None, methods=FITTING, parse=parse_optional(parse_int),
                                check=_int_or_none_at_least(1), metavar="N",
                                help="Monte-Carlo draws of a composite's intermediate in "
                                     "its density (runtime spec 4.1; default 100)")
    # ---- the start (SVI, HMC, NUTS started from a run)
    start_at: str = _opt("means", methods=FITTING - {"prior", "pathfinder"}, choices=START_AT,
                         check=_choice(*START_AT),
                         help="from an HMC/NUTS run (--from): its posterior means, or its "
                              "draws (chains continue from their last draws; SVI's guide "
                              "matches them)")
    # ---- SVI
    steps: int = _opt(1000, methods=frozenset({"svi"}), parse=parse_int,
                      check=_int_at_least(1), metavar="N",
                      help="SVI: optimisation steps")
    lr: float = _opt(0.01, methods=frozenset({"svi"}), parse=parse_float,
                     check=_positive_number, metavar="LR",
                     help="SVI: Adam learning rate")
    elbo_particles: int = _opt(1, methods=frozenset({"svi"}), parse=parse_int,
                               check=_int_at_least(1), metavar="K",
                               help="SVI: ELBO particles per step")
    guide: str = _opt("meanfield", methods=frozenset({"svi"}), parse=parse_guide,
                      check=_guide, metavar="GUIDE",
                      help="SVI: the guide: meanfield, fullrank, lowrank:K (diagonal plus "
                           "rank K), flow (a normalizing flow), map (the mode) or laplace "
                           "(a Normal at the mode)")
    resample: str = _opt("none", methods=frozenset({"svi", "pathfinder"}),
                         choices=RESAMPLES, check=_choice(*RESAMPLES),
                         help="SVI (every guide but map): psis resamples the run's draws "
                              "from guide draws by Pareto-smoothed importance weights "
                              "when the guide's k-hat is below 0.7 (none: the guide's own "
                              "draws); laplace and Pathfinder: amis, rounds of adaptive "
                              "importance sampling from the approximation, resampled "
                              "when their k-hat is below 0.7")
    batch_size: Optional[int] = _opt(
        None, methods=frozenset({"svi"}), parse=parse_optional(parse_int),
        check=_int_or_none_at_least(1), metavar="B",
        help="SVI: rows of the data per step (minibatches drawn without replacement "
             "within an epoch, their likelihood scaled by rows / B; default: all rows)")
    # ---- Pathfinder (qvr.inference.vi.pathfinder; Stan's defaults)
    paths: int = _opt(4, methods=PATHFINDER, parse=parse_int, check=_int_at_least(1),
                      metavar="I", help="Pathfinder: independent L-BFGS paths (1: the one "
                                        "path's draws, no resampling)")
    path_draws: int = _opt(1000, methods=PATHFINDER, parse=parse_int,
                                 check=_int_at_least(1), metavar="M",
                                 help="Pathfinder: draws of each path's approximation")
    psis_draws: int = _opt(1000, methods=PATHFINDER, parse=parse_int,
                           check=_int_at_least(1), metavar="R",
                           help="Pathfinder: draws resampled (PSIS weights) from the "
                                "paths' pooled draws: the run's draws")
    history: int = _opt(5, methods=PATHFINDER, parse=parse_int, check=_int_at_least(1),
                        metavar="J", help="Pathfinder: L-BFGS history size")
    lbfgs_iters: int = _opt(1000, methods=PATHFINDER, parse=parse_int,
                            check=_int_at_least(1), metavar="L",
                            help="Pathfinder: maximum L-BFGS iterations per path")
    elbo_draws: int = _opt(25, methods=PATHFINDER, parse=parse_int, check=_int_at_least(1),
                           metavar="K", help="Pathfinder: draws per ELBO estimate")
    # ---- HMC / NUTS
    num_warmup: int = _opt(500, methods=MCMC, flag="--warmup", parse=parse_int,
                           check=_int_at_least(0), metavar="N",
                           help="HMC/NUTS: warmup iterations per chain")
    num_samples: int = _opt(500, methods=MCMC | {"prior"}, flag="--samples",
                            parse=parse_int, check=_int_at_least(1), metavar="N",
                            help="HMC/NUTS: draws per chain; prior: prior draws")
    num_chains: int = _opt(4, methods=MCMC, flag="--chains", parse=parse_int,
                           check=_int_at_least(1), metavar="C",
                           help="HMC/NUTS: chains")
    step_size: float = _opt(0.1, methods=MCMC, parse=parse_float, check=_positive_number,
                            metavar="EPS", help="HMC/NUTS: initial step size")
    num_steps: int = _opt(10, methods=frozenset({"hmc"}), flag="--leapfrog-steps",
                          parse=parse_int, check=_int_at_least(1), metavar="L",
                          help="HMC: leapfrog steps per iteration")
    max_tree_depth: int = _opt(10, methods=frozenset({"nuts"}), parse=parse_int,
                               check=_int_at_least(1), metavar="D",
                               help="NUTS: maximum tree depth")
    uturn: str = _opt("momentum", methods=frozenset({"nuts"}),
                      choices=("momentum", "displacement"),
                      check=_choice("momentum", "displacement"),
                      help="NUTS: U-turn test: momentum (Stan's) or displacement "
                           "(nutpie's: shorter trees, fewer leapfrogs; fewer effective "
                           "draws on some hard posteriors)")
    step_jitter: Optional[float] = _opt(
        None, methods=MCMC, parse=parse_optional(parse_float), check=_jitter_or_none,
        metavar="J", help="HMC/NUTS: each iteration steps by eps * (1 + J * U(-1, 1)) "
                          "(default 0.1 NUTS, as nutpie; 0 HMC, as Stan)")
    target_accept: Optional[float] = _opt(
        None, methods=MCMC, parse=parse_optional(parse_float), check=_probability_or_none,
        metavar="P", help="HMC/NUTS: step-size adaptation target (default 0.65 HMC, 0.8 NUTS)")
    mass_matrix: Optional[str] = _opt(
        None, methods=MCMC, parse=parse_optional(str),
        choices=("identity", "diagonal", "dense"),
        check=_choice("identity", "diagonal", "dense", optional=True),
        help="HMC/NUTS: mass matrix (default identity for HMC, diagonal for NUTS; dense "
             "undoes correlations: D x D per leapfrog)")
    adapt: str = _opt("fisher", methods=MCMC, choices=("fisher", "stan"),
                      check=_choice("fisher", "stan"),
                      help="HMC/NUTS: warmup adaptation of the metric: fisher "
                           "(nutpie's: draws and gradients, early short windows; also "
                           "dense) or stan (Stan's windows: draws only)")
    init_strategy: str = _opt("prior", methods=MCMC, flag="--init",
                              choices=("prior", "zero", "optimize", "pathfinder"),
                              check=_choice("prior", "zero", "optimize", "pathfinder"),
                              help="HMC/NUTS: initial positions: prior (near the "
                                   "unconstrained origin), zero, optimize (near the "
                                   "highest point of a short multi-start climb: models "
                                   "with a separated minor mode, e.g. ODEs), or pathfinder "
                                   "(distinct draws of a 4-path Pathfinder, the metric "
                                   "started from its inverse-Hessian diagonal)")
    chain_method: str = _opt("vectorized", methods=MCMC,
                             choices=CHAIN_METHODS, check=_choice(*CHAIN_METHODS),
                             help="HMC/NUTS: run chains as one batch (vectorized), one after "
                                  "the other, over worker processes (parallel), or over the "
                                  "ranks of torchrun / qvr run --nproc (distributed)")
    threads: Optional[int] = _opt(
        None, methods=ALL, parse=parse_optional(parse_int), check=_threads_or_none,
        metavar="N", help="torch threads while fitting (default: OMP_NUM_THREADS when "
                          "set; HMC/NUTS 1, a step's kernels are tiny; other methods 1 on a "
                          "busy machine, where a second thread waits for a core, else all "
                          "cores: qvr.inference.threads)")
    # ---- SMC
    particles: int = _opt(64, methods=frozenset({"smc"}), parse=parse_int,
                          check=_int_at_least(1), metavar="N",
                          help="SMC: number of particles")
    expansion: int = _opt(1, methods=frozenset({"smc"}), parse=parse_int,
                          check=_int_at_least(1), metavar="K",
                          help="SMC: children per unfinished particle and step")
    max_len: int = _opt(32, methods=frozenset({"smc"}), parse=parse_int,
                        check=_int_at_least(1), metavar="L",
                        help="SMC: maximum sequence length in tokens")
    eos: Optional[int] = _opt(None, methods=frozenset({"smc"}),
                              parse=parse_optional(parse_int),
                              check=_int_or_none_at_least(0), metavar="ID",
                              help="SMC: end-of-sequence token (default: the vocabulary's "
                                   "<eos>, else required)")
    bos: Optional[int] = _opt(None, methods=frozenset({"smc"}),
                              parse=parse_optional(parse_int),
                              check=_int_or_none_at_least(0), metavar="ID",
                              help="SMC: token fed before every prefix (default: the eos "
                                   "token)")
    forbid: list = _opt([], methods=frozenset({"smc"}), parse=parse_pattern,
                        check=_token_patterns, metavar="ID[,ID...]", repeat=True,
                        help="SMC: forbid a token (an id or a vocabulary word), or a run "
                             "of tokens T,T,...; repeatable")
    require: list = _opt([], methods=frozenset({"smc"}), parse=parse_requirement,
                         check=_requirements, metavar="ID@N", repeat=True,
                         help="SMC: require a token (id or word) among the first N; "
                              "repeatable")
    min_len: Optional[int] = _opt(None, methods=frozenset({"smc"}),
                                  parse=parse_optional(parse_int),
                                  check=_int_or_none_at_least(1), metavar="L",
                                  help="SMC: forbid ending before L tokens")
    cache: bool = _opt(True, methods=frozenset({"smc"}), flag=None,
                       check=lambda v: None if isinstance(v, bool) else
                       f"must be true or false, got {v!r}",
                       help="SMC: keep per-particle model state instead of recomputing "
                            "prefixes (--no-cache turns it off)")
    top: int = _opt(10, methods=frozenset({"smc"}), parse=parse_int, check=_int_at_least(1),
                    metavar="K", help="SMC: number of top sequences kept in the summary "
                                      "(default 10)")
    lm: Optional[str] = _opt(None, methods=frozenset({"smc"}), parse=str,
                             check=lambda v: None if v is None or (isinstance(v, str) and v)
                             else f"must be a folder or a model name, got {v!r}",
                             metavar="PATH_OR_NAME",
                             help="SMC: steer a pretrained causal language model (Hugging "
                                  "Face transformers: a save_pretrained folder or a model in "
                                  "the local cache, e.g. gpt2) instead of the program's "
                                  "next-token model; words are text")
    lm_dtype: str = _opt("float32", methods=frozenset({"smc"}),
                         choices=("float32", "bfloat16"),
                         check=_choice("float32", "bfloat16"),
                         help="SMC with --lm: the model's dtype")
    prompt: str = _opt("", methods=frozenset({"smc"}), parse=str,
                       check=_text, metavar="TEXT",
                       help="SMC with --lm: the text every particle continues")
    forbid_letters: str = _opt("", methods=frozenset({"smc"}), parse=str,
                               check=_text, metavar="LETTERS",
                               help="SMC with --lm: letters the text must not hold, either "
                                    "case (a lipogram)")
    max_word_len: Optional[int] = _opt(None, methods=frozenset({"smc"}),
                                       parse=parse_optional(parse_int),
                                       check=_int_or_none_at_least(1), metavar="N",
                                       help="SMC with --lm: no word longer than N characters")
    template: str = _opt("", methods=frozenset({"smc"}), parse=str,
                         check=_text, metavar="TEXT",
                         help="SMC with --lm: the text follows TEXT word by word, each _ "
                              "one free word (infilling), and ends with it")
    # ---- after the fit (qvr.inference.criticism.pointwise)
    pointwise: bool = _opt(True, methods=FITTING, flag=None,
                           check=lambda v: None if isinstance(v, bool) else
                           f"must be true or false, got {v!r}",
                           help="record the pointwise log-likelihood and predictive "
                                "replicates after the fit, and check them (LOO, predictive "
                                "checks; --no-pointwise turns it off)")
    pointwise_draws: Optional[int] = _opt(
        None, methods=FITTING, parse=parse_optional(parse_int),
        check=_int_or_none_at_least(1), metavar="N",
        help="draws per chain the pointwise terms are computed for (evenly thinned; "
             "default: all that fit in a tenth of the fit's time, at least 10 s)")
    # ---- reporting
    progress_interval: float = _opt(0.1, flag=None, check=_non_negative_number,
                                    help="minimum seconds between progress events")

    # ------------------------------------------------------------ queries
    @staticmethod
    def options(method: Optional[str] = None) -> list[tuple[dataclasses.Field, Opt]]:
        """The options (field, metadata) of `method` (all when None), in declaration order."""
        out = []
        for f in dataclasses.fields(FitConfig):
            opt = f.metadata["opt"]
            if method is None or method in opt.methods:
                out.append((f, opt))
        return out

    @staticmethod
    def default(name: str):
        f = next(f for f in dataclasses.fields(FitConfig) if f.name == name)
        return f.default_factory() if f.default is dataclasses.MISSING else f.default

    @staticmethod
    def set_options(config: dict) -> list:
        """`[(name, value)]`: the options of a run's recorded `config` (a `to_dict`) that
        differ from their defaults, among its method's (`options(method)`), in declaration
        order, `method` left out: how the run was asked for beyond the defaults."""
        out = []
        for f, _ in FitConfig.options(config.get("method")):
            if f.name != "method" and f.name in config and \
                    config[f.name] != FitConfig.default(f.name):
                out.append((f.name, config[f.name]))
        return out

    @staticmethod
    def help_of(name: str) -> str:
        """The option's help with its default (when the help does not say it)."""
        f = next(f for f in dataclasses.fields(FitConfig) if f.name == name)
        opt = f.metadata["opt"]
        default = FitConfig.default(name)
        if "(default" in opt.help or default in (None, "", [], (), {}):
            return opt.help
        shown = "on" if default is True else "off" if default is False else default
        return f"{opt.help} (default {shown})"

    @property
    def start_choice(self) -> Optional[str]:
        """`start_at` where it applies (an SVI, HMC or NUTS fit: what it takes from an
        HMC/NUTS run it starts from), None for SMC (which takes a run's parameters)."""
        return self.start_at if self.method in FITTING - {"prior", "pathfinder"} else None

    def errors(self) -> dict[str, str]:
        """Every invalid value as ``{field: message}`` (empty when valid)."""
        out = {}
        for f, opt in self.options():
            if opt.check is not None:
                msg = opt.check(getattr(self, f.name))
                if msg:
                    out[f.name] = msg
        if self.data is not None and self.synthetic is not None:
            out["synthetic"] = "give either a data file or synthetic rows, not both"
        if self.lm is None and self.prompt:
            out["prompt"] = "needs --lm (a pretrained language model's text)"
        if self.lm is None and self.lm_dtype != "float32":
            out["lm_dtype"] = "needs --lm (a pretrained language model)"
        for name in ("forbid_letters", "max_word_len", "template"):
            if self.lm is None and getattr(self, name) not in ("", None):
                out[name] = "needs --lm (a constraint on a pretrained language model's text)"
        if self.method == "svi" and self.resample == "psis" and "guide" not in out \
                and split_guide(self.guide)[0] == "map":
            out["resample"] = ("psis needs draws with a density, and --guide map is one "
                               "point (the mode): use --guide laplace")
        if self.method == "svi" and self.resample == "amis" and "guide" not in out \
                and split_guide(self.guide)[0] != "laplace":
            out["resample"] = ("amis starts from a Normal over every latent: use --guide "
                               "laplace or --method pathfinder (with "
                               f"--guide {split_guide(self.guide)[0]}: --resample psis)")
        if self.method == "pathfinder" and self.resample == "psis":
            out["resample"] = ("Pathfinder resamples its draws by PSIS always: drop it, or "
                               "use --resample amis")
        if isinstance(self.template, str) and self.template and not self.template.split():
            out["template"] = "must hold at least one word or _"
        return out

    def validate(self) -> "FitConfig":
        errs = self.errors()
        if errs:
            raise ConfigError(errs)
        return self

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "FitConfig":
        """A config from a mapping (e.g. ``run.json``); unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError({k: f"unknown option (known: {', '.join(sorted(names))})"
                               for k in unknown})
        return cls(**dict(data))

    def for_method(self) -> dict:
        """The options that matter for this config's method (for records and displays)."""
        return {f.name: _plain(getattr(self, f.name)) for f, _ in self.options(self.method)}


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def start_at_error(start_at: Optional[str], run_method: Optional[str] = None,
                   has_run: bool = True) -> Optional[str]:
    """Why ``start_at`` cannot be used with the run a fit starts from (None when it can).

    ``"draws"`` needs a run to start from (``start_from``, ``qvr run --from``) and that run
    must be an HMC or NUTS run (its draws); ``"means"`` goes with any run, or none.  This
    is a check across `FitConfig` and the run, which `FitConfig` does not hold, so it is
    made where the run is known: `qvr run` before it creates the run folder (a usage
    error), `qvr.inference.front.start.load_start` when the run is opened (a `StartError`), and
    `fit` when no run was given (a `ConfigError`).  Torch-free, so the
    dashboard's form can use it too."""
    if start_at != "draws":
        return None
    if not has_run:
        return ("draws needs a run to start from (--from RUN, fit(start_from=RUN)): an HMC "
                "or NUTS run whose draws start the fit")
    if run_method not in MCMC:
        return (f"draws needs an HMC or NUTS run to start from, and that run's method is "
                f"{run_method} (start_at means, the default, starts from its fitted "
                f"parameters)")
    return None


def shipped_options(program_path, method: Optional[str] = None) -> tuple:
    """``(path, options)``: the fit options shipped beside a program
    (``data/NAME.fit.json``, `qvr.datafiles.find_fit_options`), the defaults of `qvr run`
    and of the dashboard's setup form for that program — only those of `method` when it is
    given.  ``(None, {})`` when there is no such file.  A file that is not a JSON object,
    or names an option `FitConfig` does not have, is a `ValueError` naming the file."""
    from qvr.datafiles import DataFileError, find_fit_options, load_fit_options
    path = find_fit_options(program_path) if program_path else None
    if path is None:
        return None, {}
    try:
        data = load_fit_options(path)
    except DataFileError as exc:
        raise ValueError(str(exc)) from None
    check_option_names(data, str(path), method)
    opts = {f.name: opt for f, opt in FitConfig.options()}
    out = {k: v for k, v in data.items() if k != "method"
           and (method is None or method in opts[k].methods)}
    return path, out


def check_option_names(data: dict, where: str, method: Optional[str] = None) -> None:
    """A `ValueError` naming `where` when `data` (fit options from a file) has a name
    `FitConfig` does not know, or a ``method`` other than `method`."""
    names = {f.name for f, _ in FitConfig.options()}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown option {', '.join(unknown)}")
    if method is not None and data.get("method", method) != method:
        raise ValueError(f"{where}: method {data['method']!r} differs from --method {method}")

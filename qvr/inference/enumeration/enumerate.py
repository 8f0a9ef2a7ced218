"""Finite latents summed out exactly: automatic enumeration (runtime spec 5.3, 6.1).

A latent `sample` site whose support is finite — a lookup-table or relational kernel into a
`FinSet` (`sample regime <- five_steps`), a `discretize` morphism, an inline `Categorical` or
`Bernoulli` — is not a coordinate of guides or MCMC: the log joint that SVI, HMC and NUTS
use is the log joint with those sites summed out,

    log p(continuous, observed) = log sum_{finite values} p(continuous, finite, observed),

computed by variable elimination in the order the program gives (program order), as Pyro's
`TraceEnum_ELBO` and NumPyro's NUTS do:

* **Structure.** One forward run with a dependency-tracking environment records which
  finite sites every contribution (site log-density, `score`, `marginalize` block) reads,
  directly or through lets.  Each contribution is a *factor* over those sites.
* **Rows.** A *local* finite site holds one value per row, `(B,)`; a factor over local
  sites must be row-shaped (row `n` depends on row `n`'s values only), and the elimination
  runs for all rows at once on `(B, K, ...)` tables.  A *global* finite site (one scalar
  value) is summed in an outer loop over its classes.
* **Tables.** The factor tables are filled by running the program at a few joint
  assignments: the sites are coloured so that no factor holds two sites of one colour, and
  every assignment of the colours is one pass (a chain of states needs `K^2` passes,
  independent per-row sites `K`).  A chain `r_1 -> r_2 -> ... -> r_T` with emissions is
  then eliminated in program order: the forward algorithm, `O(T K^2)`.
* **One wide pass.** Without global finite sites, the passes run as *one* run of the
  program on `passes x B` rows (pass-major): the enumerated sites hold pass `p`'s value in
  rows `p*B .. p*B+B-1`, every row-shaped value (the input, observations, host data and
  the environment of the steps that depend on no enumerated site, whenever its leading
  size is `B`) is tiled, and only the dependent steps run.  The factors are row-shaped,
  so row block `p` of a factor's contribution is pass `p`'s.  A chain of `T` states then
  costs one run of the program with `K^2` times as many rows instead of `K^2` runs (the
  interpreter's per-step overhead dominates small models: 16x fewer steps for `K = 4`),
  and the traced MCMC density stays small enough to compile.  Tiling by leading size is
  a heuristic (a value whose leading size is `B` by coincidence would be tiled wrongly),
  so the wide run is used only if it reproduces the one-by-one passes at the forward
  run's values when the structure is built; otherwise the passes run one by one.
* **Limits.** A plate-indexed finite site, a finite value of another shape, a factor over
  local sites that is not row-shaped, or an elimination whose intermediate table or number
  of passes would be exponential raises `EnumerationError` (a `ValueError`) naming the site
  and what to write instead (a `marginalize` block, or observing the site).

`enumerated_log_joint(model, x, values)` is the `(B,)` log joint with every finite latent
absent from `values` summed out (the plain `log_joint` when there is none);
`enumerated_total` its sum.  `prepare(model, x, observations)` builds the structure outside
any `vmap`.  Posterior marginals and samples of the finite sites: `qvr.inference.enumeration.discrete`.

References:
  Koller & Friedman (2009), Probabilistic Graphical Models, ch. 9 (variable elimination).
  Obermeyer et al. (2019), Tensor Variable Elimination for Plated Factor Graphs (Pyro).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Optional

import torch

#: largest number of program passes one enumeration may take
MAX_PASSES = 4096
#: largest table (entries per row) one elimination step may build
MAX_TABLE = 1 << 16
#: largest number of rows (passes x program rows) of one wide pass (see `_run_wide`)
MAX_WIDE_ROWS = 1 << 16

_FINITE_FAMILIES = ("Categorical", "Bernoulli")
_INFINITE_DISCRETE = ("Poisson", "NegativeBinomial", "Geometric")


class EnumerationError(ValueError):
    """A finite latent that cannot be summed out exactly (or cheaply); names the site."""

    def __init__(self, message: str, site: Optional[str] = None):
        super().__init__(message)
        self.site = site


# ---------------------------------------------------------------- static facts

def _model_of(model):
    if hasattr(model, "execute"):
        return model
    inner = getattr(model, "morphism", None)
    return inner if inner is not None and hasattr(inner, "execute") else model


def _top_site_steps(model):
    from qvr.runtime.steps import SiteStep
    walk = getattr(model, "_walk", None)
    if walk is None:
        return []
    return [s for s, inside in walk() if isinstance(s, SiteStep) and not inside]


def is_finite_support(support) -> bool:
    """A discrete support with finitely many values (`{0..K-1}` or boolean)."""
    if support is None or not getattr(support, "is_discrete", False):
        return False
    from torch.distributions import constraints
    if support is constraints.boolean or type(support).__name__ == "_Boolean":
        return True
    lo, hi = getattr(support, "lower_bound", None), getattr(support, "upper_bound", None)
    return isinstance(lo, int) and isinstance(hi, int)


def support_range(support) -> tuple[int, int]:
    """`(lower, K)` of a finite support."""
    from torch.distributions import constraints
    if support is constraints.boolean or type(support).__name__ == "_Boolean":
        return 0, 2
    return int(support.lower_bound), int(support.upper_bound) - int(support.lower_bound) + 1


def finite_site_names(model) -> list[str]:
    """Names of the sample/observe sites (outside marginalize blocks) whose values lie in a
    finite set: the sites enumeration sums out when they are latent.  Static (no input)."""
    model = _model_of(model)
    cache = model.__dict__.get("_qvr_finite_sites")
    if cache is not None:
        return cache
    out = []
    for step in _top_site_steps(model):
        if step.family is not None:
            if step.family in _FINITE_FAMILIES:
                out.append(step.name)
            continue
        module = getattr(model, step.module_name, None)
        if getattr(module, "output_discrete", False) and \
                is_finite_support(getattr(module, "support", None)):
            out.append(step.name)
    model.__dict__["_qvr_finite_sites"] = out
    return out


def check_discrete_latent(name: str, support) -> None:
    """Raise for a latent discrete site that enumeration cannot sum out."""
    if support is not None and getattr(support, "is_discrete", False) and \
            not is_finite_support(support):
        raise EnumerationError(
            f"latent site `{name}` has an infinite discrete support ({support}); it cannot "
            "be summed out, and guides and MCMC handle only continuous latents: observe it, "
            "or give it a finite support (a Categorical or a kernel into a FinSet)", name)


# ---------------------------------------------------------------- dependency tracking

class _TrackEnv(dict):
    """An environment that records every name read (the dependency pass)."""

    def __init__(self, *args, reads=None):
        super().__init__(*args)
        self.reads = reads if reads is not None else set()

    def __getitem__(self, key):
        self.reads.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.reads.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.reads.add(key)
        return super().__contains__(key)

    def child(self):
        return _TrackEnv(self, reads=self.reads)


@dataclass
class _Site:
    name: str
    index: int  # program order
    kind: str  # local | global
    lower: int
    K: int
    dtype: torch.dtype
    shape: tuple = ()
    color: int = -1


@dataclass
class _Factor:
    key: str  # record name carrying the contribution
    scope: tuple  # finite site names, program order
    local: tuple  # the local ones
    glob: tuple  # the global ones


@dataclass
class Structure:
    """The enumeration plan of one model, input shape and set of enumerated sites."""

    sites: dict  # name -> _Site (program order)
    factors: list  # _Factor, one per contribution that depends on an enumerated site
    constant: list  # record names of contributions that depend on none
    colors: int
    color_range: list  # per colour: the number of values it takes
    B: int
    passes: list = field(default_factory=list)  # (global assignment, colour assignment)
    dependent: set = field(default_factory=set)  # steps rerun in every pass
    #: all passes as one wide run (rows = passes x rows), checked against the passes one
    #: by one when the structure is built (`_check_wide`)
    wide: bool = False
    #: per factor: for every cell of its table (row-major over its local scope), the pass
    #: that fills it
    cell_pass: list = field(default_factory=list)

    @property
    def local_sites(self) -> list:
        return [s for s in self.sites.values() if s.kind == "local"]

    @property
    def global_sites(self) -> list:
        return [s for s in self.sites.values() if s.kind == "global"]


def _contribution_key(step):
    from qvr.runtime.steps import LetStep, MarginalizeStep, SiteStep
    if isinstance(step, SiteStep):
        return step.name
    if isinstance(step, LetStep) and step.score:
        return step.name
    if isinstance(step, MarginalizeStep):
        return step.site_name
    return None


def _bound_names(step):
    from qvr.runtime.steps import MarginalizeStep, SiteStep
    names = [step.name]
    if isinstance(step, MarginalizeStep):
        names += [s.name for s in step.body if isinstance(s, SiteStep)]
    return names


def build_structure(model, x, observations: dict, enumerated: list) -> Structure:
    """The factors of `model` over the finite sites `enumerated` (a forward run with a
    tracking environment), their colouring and the passes that fill the tables."""
    from qvr.runtime.frame import Frame
    from qvr.runtime.steps import AliasStep, LetStep, MarginalizeStep
    from qvr.runtime.values import ensure_batch
    model = _model_of(model)
    x = ensure_batch(x)
    enum_set = set(enumerated)
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        frame = Frame(model, x, dict(observations), score=False, require_all=False,
                      record=True)
        frame.env = _TrackEnv()
        model._bind_inputs(frame)
        deps: dict = {}
        scopes: list = []  # (record key, set of enumerated sites)
        dependent = set()  # indices of the steps whose result depends on an enumerated site
        for si, step in enumerate(model.steps):
            frame.env.reads = set()
            if isinstance(step, MarginalizeStep):
                # a block runs its body (so what the body reads is seen) only when scored
                frame.score = True
                try:
                    model._run(step, frame)
                finally:
                    frame.score = False
            else:
                model._run(step, frame)
            read = set(frame.env.reads)
            dep = set()
            for r in read:
                dep |= deps.get(r, set())
            own = dep | ({step.name} if step.name in enum_set else set())
            if own:
                dependent.add(si)
            # the value of a site is given (or enumerated), not a function of its parents:
            # it depends on itself only; a let's value depends on what it reads
            value_dep = dep if isinstance(step, (LetStep, AliasStep)) else set()
            for n in _bound_names(step):
                deps[n] = {n} if n in enum_set else value_dep
            key = _contribution_key(step)
            if key is not None:
                scopes.append((key, own))
    B = frame.B
    order = [n for n in frame.records if n in enum_set]
    sites = {}
    for i, name in enumerate(order):
        rec = frame.records[name]
        v = rec.value
        check_discrete_latent(name, rec.support)
        if not is_finite_support(rec.support):
            raise EnumerationError(f"latent site `{name}` is not finite; cannot enumerate it",
                                   name)
        lower, K = support_range(rec.support)
        shape = tuple(v.shape) if isinstance(v, torch.Tensor) else None
        if rec.site_kind == "plate":
            raise EnumerationError(
                f"latent site `{name}` is a finite site over a plate: one class per plate "
                "element is summed out only by a grouped block; write `marginalize "
                f"{name} : K <- Categorical(p) [over=I]` with `via=` on the observes that "
                "use it", name)
        if shape == ():
            kind = "global"
        elif shape and shape[0] == B and math.prod(shape) == B:
            kind = "local"  # (B,) or (B, 1): one value per row
        else:
            raise EnumerationError(
                f"latent site `{name}` holds a finite value of shape {shape} (one per row "
                f"is {(B,)}): every position would be a separate latent and summing them "
                "out jointly is exponential; marginalize it in a `marginalize` block, or "
                "observe it", name)
        sites[name] = _Site(name, i, kind, lower, K, v.dtype, shape)
    rank = {n: i for i, n in enumerate(order)}
    factors, constant = [], []
    for key, scope in scopes:
        scope = tuple(sorted((s for s in scope if s in sites), key=rank.get))
        if not scope:
            constant.append(key)
            continue
        factors.append(_Factor(key, scope,
                               tuple(s for s in scope if sites[s].kind == "local"),
                               tuple(s for s in scope if sites[s].kind == "global")))
    # colour the local sites: no factor holds two sites of one colour
    colors = []
    for s in (s for s in sites.values() if s.kind == "local"):
        taken = {sites[o].color for f in factors if s.name in f.local
                 for o in f.local if o != s.name and sites[o].color >= 0}
        c = 0
        while c in taken:
            c += 1
        s.color = c
        if c == len(colors):
            colors.append(0)
        colors[c] = max(colors[c], s.K)
    n_glob = math.prod(s.K for s in sites.values() if s.kind == "global")
    n_passes = n_glob * math.prod(colors)
    if n_passes > MAX_PASSES:
        worst = max(sites.values(), key=lambda s: sum(s.name in f.scope for f in factors))
        raise EnumerationError(
            f"summing out the finite latents {', '.join(f'`{n}`' for n in sites)} would "
            f"take {n_passes} evaluations of the program (more than {MAX_PASSES}): too many "
            f"of them interact (e.g. `{worst.name}`); put the coupled ones in a "
            "`marginalize` block, or observe some of them", worst.name)
    st = Structure(sites, factors, constant, len(colors), colors, B, dependent=dependent)
    glob = [s for s in sites.values() if s.kind == "global"]
    for g in itertools.product(*[range(s.K) for s in glob]):
        for c in itertools.product(*[range(r) for r in colors]):
            st.passes.append((g, c))
    _check_elimination(st)
    # the rows check runs one pass: continuous latents at their values of the forward run
    drawn = {n: r.value for n, r in frame.records.items()
             if r.step in ("sample", "observe") and n not in enum_set and n not in observations}
    _check_rows(model, x, {**observations, **drawn}, st)
    _check_wide(model, x, {**observations, **drawn}, st)
    return st


def _cell_passes(st: Structure) -> list:
    """Per factor, the pass filling each cell of its table (the first pass whose colour
    assignment gives the cell's values, as the one-by-one passes take it)."""
    out = []
    for f in st.factors:
        Ks = [st.sites[s].K for s in f.local]
        first = {}
        for i, (_, c) in enumerate(st.passes):
            first.setdefault(tuple(c[st.sites[s].color] for s in f.local), i)
        out.append([first[idx] for idx in itertools.product(*[range(k) for k in Ks])])
    return out


def _check_wide(model, x, values, st: Structure) -> None:
    """Use one wide pass (`_run_wide`) for `st` if it can: no global finite site, not
    too many rows, and the same tables as the passes one by one at `values`."""
    st.wide = False
    if st.global_sites or not st.factors or len(st.passes) < 2 or \
            len(st.passes) * st.B > MAX_WIDE_ROWS:
        return
    try:
        with torch.no_grad():
            const_n, narrow = _tables(model, x, values, st)
            st.cell_pass = _cell_passes(st)
            st.wide = True
            const_w, wide = _tables(model, x, values, st)
    except Exception:  # the wide run is an optimisation: any failure keeps the passes
        st.wide = False
        return
    same = (const_n is None) == (const_w is None) and \
        (const_n is None or torch.allclose(const_n, const_w, rtol=1e-5, atol=1e-5))
    for a, b in zip(narrow[()], wide[()]):
        same = same and a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-5)
    st.wide = bool(same)


def _check_elimination(st: Structure) -> None:
    """Simulate the elimination on scopes: raise if a table would be too large."""
    scopes = [set(f.local) for f in st.factors if f.local]
    for s in st.local_sites:
        involved = [sc for sc in scopes if s.name in sc]
        union = set().union(*involved) if involved else {s.name}
        size = math.prod(st.sites[n].K for n in union)
        if size > MAX_TABLE:
            raise EnumerationError(
                f"summing out `{s.name}` in program order builds a table over "
                f"{', '.join(f'`{n}`' for n in sorted(union, key=lambda n: st.sites[n].index))}"
                f" ({size} entries per row, more than {MAX_TABLE}): exponential in the "
                "number of coupled finite latents; marginalize some of them in a "
                "`marginalize` block, or observe them", s.name)
        scopes = [sc for sc in scopes if s.name not in sc]
        rest = union - {s.name}
        if rest:
            scopes.append(rest)


def _check_rows(model, x, observations, st: Structure) -> None:
    """Factors over local finite sites must be row-shaped (one value per row)."""
    if not any(f.local for f in st.factors):
        return
    with torch.no_grad():
        ex = _run_pass(model, x, observations, st, 0)
    for f in st.factors:
        if not f.local:
            continue
        c = ex.records[f.key].contribution
        c = torch.as_tensor(c)
        if not (c.dim() >= 1 and c.shape[0] == st.B):
            raise EnumerationError(
                f"`{f.key}` depends on the finite latent `{f.local[0]}` (one value per row) "
                f"but its log-density is not one value per row (shape {tuple(c.shape)}): "
                "the rows are coupled and summing them out is exponential; write the "
                f"latent as a `marginalize {f.local[0]} ...` block, or observe it", f.local[0])


# ---------------------------------------------------------------- evaluation

def _pass_values(st: Structure, values: dict, index: int, x) -> dict:
    g, c = st.passes[index]
    out = dict(values)
    device = x.device
    for s, gv in zip(st.global_sites, g):
        out[s.name] = torch.tensor(s.lower + gv, dtype=torch.long, device=device)
    for s in st.local_sites:
        v = min(c[s.color], s.K - 1)
        out[s.name] = torch.full(s.shape, s.lower + v, dtype=torch.long, device=device)
    return out


def _run_pass(model, x, values, st: Structure, index: int, first=None):
    """One pass: the program at one joint assignment of the enumerated sites.  Given the
    `first` pass's frame, only the steps that depend on an enumerated site are rerun (the
    others' values are the same in every pass); returns the frame (records, env)."""
    if first is None:
        return _run_steps(model, x, values, st, index, lambda si: True)
    return _run_steps(model, x, values, st, index, st.dependent.__contains__, first)


def _run_steps(model, x, values, st: Structure, index: int, keep, first=None):
    """The steps `keep(step_index)` selects, at pass `index`'s assignment, in a frame of
    their own (inputs bound, or `first`'s environment carried over); the frame."""
    from qvr.runtime.errors import QvrRuntimeError
    from qvr.runtime.frame import Frame
    frame = Frame(model, x, _pass_values(st, values, index, x), score=True, require_all=True,
                  record=True)
    try:
        if first is None:
            model._bind_inputs(frame)
        else:
            frame.env = dict(first.env)
        for si, step in enumerate(model.steps):
            if keep(si):
                model._run(step, frame)
    except QvrRuntimeError as e:
        raise e.add_context(program=model.label)
    return frame


def _tile(v, B: int, P: int):
    """`v` repeated `P` times along its first axis when that axis has size `B` (a row-shaped
    value, as far as its shape tells), else `v` itself."""
    if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == B:
        return v.repeat(P, *([1] * (v.dim() - 1)))
    return v


def _run_constant(model, x, values, st: Structure):
    """The steps that depend on no enumerated site, once (the frame of the wide run)."""
    return _run_steps(model, x, values, st, 0, lambda si: si not in st.dependent)


def _wide_values(st: Structure, device) -> dict:
    """The enumerated sites' values of the wide run, made once per structure and device.
    They are made here, not inside the density: when the MCMC density is traced
    (`make_fx`), tensors from outside are constants, so the runtime's range check of an
    index value (`as_index`) reads them instead of failing on a traced tensor."""
    cache = st.__dict__.setdefault("_wide_cache", {})
    out = cache.get(device)
    if out is None:
        out = {}
        P, B = len(st.passes), st.B
        for s in st.local_sites:
            per_pass = [s.lower + min(c[s.color], s.K - 1) for _, c in st.passes]
            v = torch.tensor(per_pass, dtype=torch.long).repeat_interleave(B)
            out[s.name] = v.reshape(P * B, *s.shape[1:]).to(device)
        cache[device] = out
    return out


def _run_wide(model, x, values, st: Structure, first):
    """All passes in one run of the dependent steps on `P * B` rows (module docstring)."""
    from qvr.runtime.errors import QvrRuntimeError
    from qvr.runtime.frame import Frame
    P, B = len(st.passes), st.B
    wide = {k: _tile(v, B, P) for k, v in values.items()}
    wide.update(_wide_values(st, x.device))
    frame = Frame(model, _tile(x, B, P), wide, score=True, require_all=True, record=True)
    frame.env = {k: _tile(v, B, P) for k, v in first.env.items()}
    try:
        for si, step in enumerate(model.steps):
            if si in st.dependent:
                model._run(step, frame)
    except QvrRuntimeError as e:
        raise e.add_context(program=model.label)
    return frame


def _wide_tables(model, x, values, st: Structure):
    first = _run_constant(model, x, values, st)
    const = None
    for key in st.constant:
        lp = first.records[key].log_prob
        const = lp if const is None else const + lp
    ex = _run_wide(model, x, values, st, first)
    P, B = len(st.passes), st.B
    tabs = []
    for f, cells in zip(st.factors, st.cell_pass):
        lp = ex.records[f.key].log_prob.reshape(P, B)
        idx = torch.tensor(cells, dtype=torch.long, device=lp.device)
        t = torch.index_select(lp, 0, idx).transpose(0, 1)
        tabs.append(t.reshape(B, *[st.sites[s].K for s in f.local]))
    return const, {(): tabs}


def _tables(model, x, values, st: Structure):
    """Run the passes; per global assignment: (constant shares (B,), {factor: table}) where
    a table is `(B, K_1, ..., K_m)` over the factor's local scope."""
    if st.wide:
        return _wide_tables(model, x, values, st)
    entries = {}  # (global assignment, factor index) -> {local idx tuple: (B,)}
    const = None
    first = None
    for i, (g, c) in enumerate(st.passes):
        ex = _run_pass(model, x, values, st, i, first)
        if i == 0:
            first = ex
            for key in st.constant:
                lp = ex.records[key].log_prob
                const = lp if const is None else const + lp
        for fi, f in enumerate(st.factors):
            idx = tuple(c[st.sites[s].color] for s in f.local)
            if any(v >= st.sites[s].K for v, s in zip(idx, f.local)):
                continue
            slot = entries.setdefault((g, fi), {})
            if idx not in slot:
                slot[idx] = ex.records[f.key].log_prob
    per_global = {}
    for g in {p[0] for p in st.passes}:
        tabs = []
        for fi, f in enumerate(st.factors):
            slot = entries[(g, fi)]
            Ks = [st.sites[s].K for s in f.local]
            cells = [slot[idx] for idx in itertools.product(*[range(k) for k in Ks])]
            t = torch.stack(cells, dim=-1).reshape(st.B, *Ks) if Ks else cells[0]
            tabs.append(t)
        per_global[g] = tabs
    return const, per_global


def _eliminate(st: Structure, tables: list, indicators: dict):
    """Variable elimination in program order for all rows at once; returns `(B,)`."""
    B = st.B
    factors = []  # (scope tuple, table (B, *K))
    rest = None
    for f, t in zip(st.factors, tables):
        if f.local:
            factors.append((f.local, t))
        else:
            rest = t if rest is None else rest + t
    for s in st.local_sites:
        ind = indicators.get(s.name)
        if ind is not None:
            factors.append(((s.name,), ind))
    rank = {s.name: s.index for s in st.local_sites}
    for s in st.local_sites:
        involved = [f for f in factors if s.name in f[0]]
        if not involved:
            continue
        factors = [f for f in factors if s.name not in f[0]]
        union = tuple(sorted(set().union(*[f[0] for f in involved]), key=rank.get))
        total = None
        for scope, t in involved:
            shape = [B] + [st.sites[n].K if n in scope else 1 for n in union]
            t = t.reshape(shape)
            total = t if total is None else total + t
        axis = 1 + union.index(s.name)
        reduced = torch.logsumexp(total, dim=axis)
        new_scope = tuple(n for n in union if n != s.name)
        if new_scope:
            factors.append((new_scope, reduced))
        else:
            rest = reduced if rest is None else rest + reduced
    if rest is None:
        rest = torch.zeros(B)
    return rest


def log_partition(model, x, values: dict, st: Structure, indicators: dict = None):
    """The summed-out log joint: `(B,)` row-attributed (no global finite site) or a 0-d
    scalar (global finite sites summed in an outer loop).  `indicators` (name -> `(B, K)`
    for local sites, `(K,)` for global ones) are added as extra factors (recovery)."""
    indicators = indicators or {}
    const, per_global = _tables(model, x, values, st)
    glob = st.global_sites
    if not glob:
        out = _eliminate(st, per_global[()], indicators)
        return out if const is None else out + const
    totals = []
    for g, tabs in sorted(per_global.items()):
        t = _eliminate(st, tabs, indicators).sum()
        for s, gv in zip(glob, g):
            ind = indicators.get(s.name)
            if ind is not None:
                t = t + ind[gv]
        totals.append(t)
    out = torch.logsumexp(torch.stack(totals), 0)
    if const is not None:
        out = out + const.sum()
    return out


# ---------------------------------------------------------------- entry points

def enumerated_names(model, values) -> list[str]:
    """The finite sites of `model` absent from `values` (the ones to sum out)."""
    return [n for n in finite_site_names(model) if n not in values]


def _key(x, observations, missing):
    return (tuple(x.shape) if isinstance(x, torch.Tensor) else None, tuple(sorted(missing)))


def prepare(model, x, observations: Optional[dict] = None,
            missing: Optional[list] = None) -> Optional[Structure]:
    """Build (and cache) the enumeration structure of `model` at `x` for the finite sites
    absent from `observations` (or the given `missing`); None when there is none.  Call it
    outside `vmap` (the dependency pass checks values)."""
    model = _model_of(model)
    observations = dict(observations or {})
    if missing is None:
        missing = enumerated_names(model, observations)
    if not missing:
        return None
    cache = model.__dict__.setdefault("_qvr_enum_cache", {})
    key = _key(x, observations, missing)
    st = cache.get(key)
    if st is None:
        st = build_structure(model, x, {k: v for k, v in observations.items()
                                        if k not in missing}, list(missing))
        cache[key] = st
    return st


def _structure(model, x, values):
    missing = enumerated_names(model, values)
    if not missing:
        return None
    cache = model.__dict__.get("_qvr_enum_cache", {})
    st = cache.get(_key(x, values, missing))
    if st is None:
        st = prepare(model, x, values, missing)
    return st


def enumerated_log_joint(model, x, values: dict) -> torch.Tensor:
    """`(B,)` log joint with every finite latent absent from `values` summed out."""
    model = _model_of(model)
    st = _structure(model, x, values)
    if st is None:
        return model.log_joint(x, values)
    from qvr.runtime.frame import attribute
    from qvr.runtime.values import ensure_batch
    out = log_partition(model, ensure_batch(x), values, st)
    if out.dim() == 0:
        return attribute(out, st.B, out.dtype, out.device)
    return out


def enumerated_total(model, x, values: dict) -> torch.Tensor:
    """The scalar `enumerated_log_joint(...).sum()` (the plain `log_joint_total` when no
    finite latent is missing)."""
    model = _model_of(model)
    st = _structure(model, x, values)
    if st is None:
        total = getattr(model, "log_joint_total", None)
        return total(x, values) if total is not None else model.log_joint(x, values).sum()
    from qvr.runtime.values import ensure_batch
    return log_partition(model, ensure_batch(x), values, st).sum()

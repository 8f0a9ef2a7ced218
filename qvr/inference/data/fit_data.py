"""The data of a fit: where it comes from, its split into input and observations, its
check against the program (once, before any fitting), and synthetic data.

Conventions: a data mapping holds arrays by observed-site name and host-data name; the
program input is the key ``"@input"`` when given, else the key ``"x"`` — unless the
program reads host data named ``x`` (a covariate, the name the runtime spec itself uses
for one, §5.2): then ``"x"`` is that host data, and only ``"@input"`` gives the input
(`input_key`).  Without an input the input is `zeros(N, 1)` with `N` the leading size of
the first observed value (1 without data) — the convention of the regression snippets.
Everything not in the data is latent.  A name declared by a `data NAME : T` step (E9.1)
is host data the program reads (`host_names`, so `reads_host` and `input_key` see it): it
comes from the data by name, the one data check runs its shape check against T, and
synthetic data draws it with T's shape (`qvr.runtime.synth_host.HostSynthesizer.shaped`).

Decision (issue 22): the checker knows whether a program reads host data `x` (a free
name in a let-expression), so the same file key cannot mean two things for one program.
Files for programs that do not read host `x` keep their meaning; a program that reads it
could never receive it before (its `x` was taken as the input), so no working file
changes meaning.  ``@`` cannot start a QVR identifier, so ``"@input"`` never collides with
host data.

Where the data of a fit comes from (`resolve_data`), first match wins:

1. ``FitConfig.synthetic = N`` — `N` rows drawn from the program's prior predictive
   (`synthesize`); the drawn latents are kept as the ground truth;
2. ``FitConfig.data = FILE`` — a data file (``.npz``, ``.json``, ``.pt``) or a folder of
   ``NAME.npy`` files, one per key;
3. a mapping given to `fit(..., data=...)`;
4. the data shipped beside the program (`qvr.datafiles.find_data`: ``data/NAME.json`` or
   ``.npz`` next to ``NAME.qvr``);
5. nothing (a program without observations, or SMC generation).

Data larger than memory (issue 26): `load_data_file(path, mapped=True)` opens a folder of
``.npy`` files or a stored (``np.savez``) ``.npz`` memory-mapped: its numeric values are
`qvr.mapped_arrays.MappedArray`s (`mapped_values` names them), of which a minibatch fit
copies only the rows of each batch into memory; a compressed member is an error, never a
silent read of the whole file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch


INPUT_KEY = "@input"


def reads_host(model, name: str) -> bool:
    """Whether `model` (or a program it calls) reads host data `name`."""
    modules = model.modules() if hasattr(model, "modules") else [model]
    return any(name in getattr(m, "host_names", ()) for m in modules)


def input_key(model, data) -> Optional[str]:
    """The data key that holds the program input (see the module docstring), None when
    the data has none."""
    if INPUT_KEY in (data or {}):
        return INPUT_KEY
    if "x" in (data or {}) and not reads_host(model, "x"):
        return "x"
    return None


class DataError(ValueError):
    """The data does not fit the program (unknown name, wrong shape, missing host data,
    unreadable file)."""


@dataclass
class FitData:
    """Resolved data: the mapping, where it came from (for the run record) and, for
    synthetic data, the drawn latents."""

    values: dict = field(default_factory=dict)
    source: dict = field(default_factory=lambda: {"kind": "none"})
    truth: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # what the user should know (fit warnings)


def load_data_file(path, mapped: bool = False) -> dict:
    """Arrays by name from ``.npz``, ``.json`` or ``.pt``, or a folder of ``NAME.npy``
    files (raises `DataError` naming the file and the cause).

    Numbers become tensors, words (string arrays) lists of strings.  `mapped=True` (a
    folder or an ``.npz`` only): the numeric values are `qvr.mapped_arrays.MappedArray`s,
    memory-mapped, none read whole (words are still read whole: a deduction parses them
    whole); an ``.npz`` with a compressed member, or a ``.json``/``.pt`` file, is a
    `DataError` — data asked for memory-mapped is never silently read into memory."""
    p = Path(path)
    if mapped:
        return _load_mapped(p, path)
    if not p.is_file() and not p.is_dir():
        raise DataError(f"{path}: no such data file or folder")
    try:
        if p.suffix == ".pt":
            obj = torch.load(p, map_location="cpu", weights_only=True)
            if not isinstance(obj, dict):
                raise DataError(f"{path}: expected a mapping from names to arrays")
            return {str(k): torch.as_tensor(v) for k, v in obj.items()}
        from qvr.datafiles import DataFileError, load_data
        floats = "float64" if torch.get_default_dtype() == torch.float64 else "float32"
        try:
            arrays = load_data(p, floats=floats)  # JSON decimals read at the fit's dtype
        except DataFileError as exc:
            raise DataError(str(exc)) from None
        arrays = {k: v for k, v in arrays.items() if not k.startswith(RELATION_PREFIX)}
        out = {}
        for k, v in arrays.items():
            a = np.asarray(v)
            if a.dtype.kind in "USO":  # words (host data a deduction parses) stay a list
                out[k] = [str(w) for w in a.tolist()] if a.ndim else str(a)
            else:
                out[k] = torch.as_tensor(a)
        return out
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: cannot read data: {exc}") from None


def _load_mapped(p: Path, path) -> dict:
    from qvr.mapped_arrays import DataFileError, open_arrays
    if not p.exists():
        raise DataError(f"{path}: no such data file or folder")
    if not p.is_dir() and p.suffix.lower() != ".npz":
        raise DataError(f"{path}: a {p.suffix or 'suffix-less'} data file cannot be "
                        f"memory-mapped: give a folder of .npy files (one NAME.npy per key) "
                        f"or an .npz written by np.savez")
    try:
        arrays = open_arrays(p)
    except DataFileError as exc:
        raise DataError(str(exc)) from None
    except Exception as exc:
        raise DataError(f"{path}: cannot read data: {exc}") from None
    out = {}
    for k, a in arrays.items():
        if k.startswith(RELATION_PREFIX):
            continue
        if a.dtype.kind in "US":  # words (host data a deduction parses) stay a list
            w = np.asarray(a)
            out[k] = [str(s) for s in w.tolist()] if w.ndim else str(w)
        else:
            out[k] = a
    return out


def mapped_values(values: dict) -> list[str]:
    """The keys of `values` whose value is a memory-mapped array (`load_data_file(...,
    mapped=True)`), in order."""
    from qvr.mapped_arrays import MappedArray
    return [k for k, v in (values or {}).items() if isinstance(v, MappedArray)]


RELATION_PREFIX = "from_data/"


def relations_for(program_path, data_file=None) -> dict:
    """The ``from_data/KEY`` tables of the data file (given, else shipped beside the
    program) as ``{KEY: array}``, for ``qvr.load(path, data=...)``: observed relations are
    part of the module, not of the fit."""
    path = Path(data_file) if data_file else shipped_data(str(program_path))
    if path is None or not path.is_file() or path.suffix == ".pt":
        return {}
    from qvr.datafiles import DataFileError, load_data
    try:
        arrays = load_data(path)
    except DataFileError as exc:
        raise DataError(str(exc)) from None
    return {k[len(RELATION_PREFIX):]: v for k, v in arrays.items()
            if k.startswith(RELATION_PREFIX)}


def shipped_data(program_path: Optional[str]) -> Optional[Path]:
    """The data file shipped beside a program, if any."""
    if not program_path or program_path.startswith("<"):
        return None
    from qvr.datafiles import find_data
    return find_data(program_path)


def resolve_data(model, config, data: Optional[dict], program_path: Optional[str]) -> FitData:
    """Where the data comes from (see the module docstring)."""
    if config.method == "smc":
        return FitData()
    if config.synthetic is not None:
        values, truth, note = _synthesize_rows(model, config.synthetic)
        rows = synthetic_rows(values, config.synthetic)
        source = {"kind": "synthetic", "rows": rows}
        if rows != config.synthetic:
            source["requested"] = config.synthetic
        return FitData(values, source, truth, [note] if note else [])
    if config.data is not None:
        p = Path(config.data)
        # minibatch SVI reads a folder of .npy or an .npz memory-mapped, a batch at a time
        # (`qvr.inference.data.minibatch`); every other fit reads the data whole
        mapped = config.method == "svi" and getattr(config, "batch_size", None) is not None \
            and (p.is_dir() or p.suffix == ".npz")
        values, notes, left = _for_export(model, load_data_file(config.data, mapped=mapped),
                                          "data file")
        return FitData(values, {"kind": "file", "path": str(p.resolve()),
                                **({"mapped": True} if mapped else {}), **left}, None, notes)
    if data is not None:
        values, notes, left = _for_export(model, dict(data), "data")
        return FitData(values, {"kind": "given", **left}, None, notes)
    found = shipped_data(program_path)
    if found is not None:
        values, notes, left = _for_export(model, load_data_file(found), "shipped data")
        return FitData(values, {"kind": "shipped", "path": str(found.resolve()), **left},
                       None, notes)
    return FitData()


def data_for_sizes(config, data: Optional[dict], program_path: Optional[str]) -> Optional[dict]:
    """The data a fit reads its sizes from (`object Child : FinSet N`,
    `qvr.runtime.sizes`), found as `resolve_data` finds it but before the program is
    compiled: None for synthetic data (the sizes are then `FitConfig.sizes`)."""
    if config.method == "smc" or config.synthetic is not None:
        return None
    if config.data is not None:
        return load_data_file(config.data, mapped=Path(config.data).is_dir())
    if data is not None:
        return dict(data)
    found = shipped_data(program_path)
    return load_data_file(found) if found is not None else None


def _for_export(model, values: dict, what: str) -> tuple[dict, list, dict]:
    """`(kept, notes, record)`: the entries of the data (`what`: "shipped data", "data
    file", "data") that the fitted export reads none of are left out, with a note, as
    CmdStan ignores what a program does not read (a Stan data file's `N`, `K`,
    `prior_only`; a shipped file's `dock_of` for an export with no station effect).  A
    size the program read from the data (`FinSet N`, `qvr.runtime.sizes`) is used, not
    left out.  A left-out key that differs from a name the export reads only by case, or
    nearly (difflib), is pointed out as a probable typo.  `record` is
    ``{"left_out": [...]}`` for the run record's `data` (empty when nothing is)."""
    known = set(getattr(model, "bound_names", ()) or ()) | set(
        getattr(model, "host_names", ()) or ())
    if not known or getattr(model, "python_built", False):
        return values, [], {}
    from qvr.runtime.sizes import bound_sizes
    sizes = set(bound_sizes(model))
    unused = [k for k in values if k not in known and k not in (INPUT_KEY, "x")]
    kept = {k: v for k, v in values.items() if k not in unused}
    unused = [k for k in unused if k not in sizes]
    if not unused:
        return kept, [], {}
    label = getattr(model, "label", "the export")
    note = (f"the {what}'s {', '.join(f'`{k}`' for k in unused)} "
            f"{'is' if len(unused) == 1 else 'are'} not read by `{label}`: left out")
    typos = [t for t in (_typo(k, known) for k in unused) if t]
    if typos:
        note += " (" + "; ".join(typos) + ")"
    return kept, [note], {"left_out": unused}


def _typo(key: str, known: set) -> Optional[str]:
    """A probable typo: `key` differs from a name the program reads only by case, or
    nearly (difflib ratio >= 0.8): the "did you mean" rule, `qvr.sema.suggest`."""
    from qvr.sema.suggest import suggest
    near = suggest(key, known, cutoff=0.8)
    if near is None:
        return None
    if near.lower() == key.lower():
        return f"`{key}` differs from `{near}` only in case: a typo?"
    return f"`{key}` is close to `{near}`: a typo?"


def split_data(model, data: Optional[dict], device="cpu") -> tuple:
    """`(x, observations)` from a data dict (see the module docstring).

    Words (a string, or a list of them) stay as they are for host data a deduction parses;
    the input `x` and observed sites need numbers, and a value that is neither (a string
    for an observed site, ragged lists, an object) is a `DataError` naming it."""
    key = input_key(model, data)
    if key == INPUT_KEY and "x" in (data or {}) and not reads_host(model, "x"):
        raise DataError(f"the data gives the program input twice, as `{INPUT_KEY}` and as "
                        f"`x` (the program reads no host data `x`): keep one of them")
    numeric = {INPUT_KEY, *([key] if key else []), *getattr(model, "site_names", [])}

    def words(k, w):
        if k in numeric:
            shown = w if isinstance(w, str) else " ".join(map(str, w[:3]))
            raise DataError(f"`{k}` needs numbers (it is "
                            f"{'the program input' if k == key else 'an observed value'}), "
                            f"got the text {shown[:40]!r}")
        return w

    def tensor(k, v):
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() and v.dtype != torch.get_default_dtype():
                v = v.to(torch.get_default_dtype())  # the fit's dtype (FitConfig.dtype)
            return v.to(device)
        if isinstance(v, str) or (isinstance(v, (list, tuple)) and v and
                                  all(isinstance(w, str) for w in v)):
            return words(k, v)  # words: host data a deduction parses
        try:
            a = np.asarray(v)
            if a.dtype.kind in "USO":  # words given as an array
                if a.dtype.kind == "O":  # a null, an object or mixed entries
                    raise TypeError("it holds entries that are not numbers (None, an "
                                    "object, or a mix; a missing entry is NaN)")
                return words(k, [str(w) for w in a.tolist()] if a.ndim else str(a))
            t = torch.as_tensor(a)
        except (TypeError, ValueError, RuntimeError) as exc:
            why = str(exc).split("\n")[0]
            if "inhomogeneous" in why:
                why = "its rows have different lengths"
            raise DataError(f"`{k}` is not an array of numbers: {why}") from None
        if t.is_floating_point() and t.dtype != torch.get_default_dtype():
            t = t.to(torch.get_default_dtype())  # float64 files against float32 parameters
        return t.to(device)
    data = {k: tensor(k, v) for k, v in (data or {}).items()}
    x = data.pop(key) if key else None
    if x is None:
        n = 1
        observed = [s for s in getattr(model, "site_names", []) if s in data]
        for name in observed:
            v = data[name]
            if v.dim() >= 1:
                n = int(v.shape[0])
                break
        else:  # E9.7: no observed value given: a computed one gives the rows
            first = next(iter(_computed(model, torch.zeros(1, 1, device=device),
                                        data).values()), None)
            if isinstance(first, torch.Tensor) and first.dim() >= 1:
                n = int(first.shape[0])
        x = torch.zeros(n, 1, device=device)
    return x, {**data, **_computed(model, x, data)}


def _computed(model, x, data: dict) -> dict:
    """E9.7: the observed values of `observe v = e <- F` steps, computed from the data
    (they are then observed sites like any other); a data key of that name is refused."""
    from qvr.runtime.computed import computed_observations, computed_sites
    sites = computed_sites(model)
    given = [s for s in sites if s in data]
    if given:
        raise DataError(f"`{given[0]}` is computed by its `observe {given[0]} = …` step "
                        f"from the data; the data must not give it (remove `{given[0]}` "
                        f"from the data)")
    return computed_observations(model, x, data) if sites else {}


def check_data(model, x, observations: dict) -> None:
    """Run the program once with the data clamped; raise `DataError` on any mismatch.

    Missing entries (design E5): the value of an `observe` step may have missing entries
    (NaN in a real value, -1 or NaN in an index value); its rows that have one are not
    observed (they contribute 0).  Everything else must be complete: the input, host data,
    and `sample` sites given in the data (an error names the value and the first row with
    a missing entry).  A partially observed `observe` value that a later step reads is an
    error too (the later step would read the placeholder or the NaN)."""
    from qvr.runtime.errors import MissingValueError, QvrRuntimeError
    from qvr.runtime.improper import improper_init
    partial = _check_missing(model, x, observations)
    try:
        # latent sites are drawn: an improper prior (E9.2) draws a fit's initial value
        with torch.no_grad(), improper_init():
            ex = model.execute(x, observations, score=True)
    except MissingValueError as exc:
        raise DataError(f"the data does not fit the program: {message_of(exc)}; give a data "
                        f"file (--data FILE: arrays by observed-site and host-data name) or "
                        f"draw synthetic data (--synthetic N)") from None
    except (QvrRuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        words = [k for k, v in observations.items() if isinstance(v, str) or (
            isinstance(v, (list, tuple)) and v and isinstance(v[0], str))]
        if words and isinstance(exc, TypeError):  # torch given text where it needs numbers
            names = ", ".join(f"`{k}`" for k in words)
            raise DataError(f"the data does not fit the program: host data {names} holds "
                            f"words, and the program uses it as numbers") from None
        raise DataError(f"the data does not fit the program: {message_of(exc)}") from None
    except RuntimeError as exc:
        why = _shape_mismatch(model, x, observations) or str(exc)
        raise DataError(f"the data does not fit the program: {why}") from None
    total = getattr(ex, "log_joint", None)
    if partial and isinstance(total, torch.Tensor) and bool(torch.isnan(total).any()):
        names = ", ".join(f"`{n}`" for n in partial)
        raise DataError(f"the data does not fit the program: the log density is NaN with "
                        f"the missing entries of {names}: a later step reads a value that "
                        f"has missing entries (only values nothing else reads can be "
                        f"partially observed)")


def _shape_mismatch(model, x, observations: dict):
    """On a torch error while scoring the data: the first observed value whose shape
    differs from what the program draws for this input, said plainly (torch's broadcast
    message names no site); None when the shapes agree or the draw fails too."""
    try:
        with torch.no_grad():
            drawn = model.execute(x, {}, score=False).sites
    except Exception:  # the draw fails too: keep torch's message
        return None
    for name, value in observations.items():
        rec = drawn.get(name)
        got = getattr(value, "shape", None)
        want = getattr(getattr(rec, "value", None), "shape", None)
        if got is not None and want is not None and tuple(got) != tuple(want):
            return (f"`{name}` has shape {tuple(got)}, but the program draws it with shape "
                    f"{tuple(want)} for the input `x` of shape {tuple(getattr(x, 'shape', ()))}")
    return None


def _first_missing_row(v: torch.Tensor, discrete: bool):
    """The first row (index along axis 0) of `v` with a missing entry (NaN; -1 too for an
    index value), -1 for a 0-d value that is missing, None when nothing is missing."""
    if not isinstance(v, torch.Tensor) or v.numel() == 0:
        return None
    if v.is_floating_point():
        bad = torch.isnan(v)
        if discrete:
            bad = bad | (v == -1)
    elif discrete and v.dtype != torch.bool:
        bad = v == -1
    else:
        return None
    if not bool(bad.any()):
        return None
    if bad.dim() == 0:
        return -1
    return int(bad.reshape(bad.shape[0], -1).any(1).nonzero()[0, 0])


def _at(row) -> str:
    return "" if row == -1 else f" at row {row}"


def _check_missing(model, x, observations: dict) -> list:
    """Inputs and host data complete, missing entries only in `observe` values that no
    later site step reads; returns the names of the partially observed sites."""
    row = _first_missing_row(x, False)
    if row is not None:
        raise DataError(f"the program input has missing entries (NaN){_at(row)}: inputs "
                        f"must be complete")
    infos = {}
    site_infos = getattr(model, "site_infos", None)
    if callable(site_infos):
        infos = {s.name: s for s in site_infos()}
    partial = []
    for name, v in observations.items():
        info = infos.get(name)
        if info is None:  # host data (or a let/alias value given in the data)
            row = _first_missing_row(v, False)
            if row is not None:
                raise DataError(f"host data `{name}` has missing entries (NaN){_at(row)}: "
                                f"inputs must be complete")
            continue
        row = _first_missing_row(v, _site_discrete(info))
        if row is None:
            continue
        if info.step != "observe":
            raise DataError(f"`{name}` has missing entries{_at(row)}: only the values of "
                            f"`observe` steps can be partially observed (a `sample` site "
                            f"given in the data must be complete)")
        partial.append(name)
    readers = _site_readers(model, set(partial))
    for name in partial:
        if name in readers:
            raise DataError(f"`{name}` has missing entries and step `{readers[name]}` reads "
                            f"it: only values nothing else reads can be partially observed")
    return partial


def _site_discrete(info) -> bool:
    if info.morphism is not None:
        return bool(getattr(info.morphism, "output_discrete", False))
    # an inline family whose one value is an integer (-1 marks a missing entry there)
    from qvr.sema.families import FAMILIES
    fam = FAMILIES.get(info.family)
    return bool(fam is not None and fam.discrete and fam.event_rank == 0)


def _site_readers(model, names: set) -> dict:
    """`{name: the first site step that reads it}` for the given names (site steps only:
    their arguments are names; let-expressions are closures, caught by the NaN check)."""
    out = {}
    walk = getattr(model, "_walk", None)
    if not names or not callable(walk):
        return out
    for step, _ in walk():
        args = getattr(step, "args", None)
        if not args or not hasattr(step, "observe"):
            continue
        read = set()
        for a in args:
            if isinstance(a, str):
                read.add(a)
            elif getattr(a, "kind", None) in ("local", "gather"):
                read.add(a.value)
                if a.index is not None:
                    read.add(a.index)
        for n in read & names:
            out.setdefault(n, step.name)
    return out


def message_of(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, KeyError) and text.startswith("'") and text.endswith("'"):
        text = text[1:-1]
    return text


def synthetic_rows(values: dict, requested: int) -> int:
    """How many rows `synthesize` drew (the input's leading size): `requested`, or the
    size of a plate whose arguments read row-level values (see `synthesize`)."""
    x = values.get(INPUT_KEY, values.get("x"))
    return int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() else requested


def synthesize(model, n: int) -> tuple[dict, dict]:
    """`n` rows from the prior predictive: `(data, truth)` (observed values and the input
    in `data`, every drawn latent in `truth`).

    A plate site whose arguments read row-level values (host data, the input) needs one
    row per element of its plate (runtime spec 5.3): when `n` rows do not fit it, the
    rows drawn are the plate's size instead (`synthetic_rows` tells how many; the run
    record keeps both).  Decision (issue 22): drawing what the program needs beats
    refusing a request whose row count the plate fixes anyway."""
    data, truth, _ = _synthesize_rows(model, n)
    return data, truth


def _synthesize_rows(model, n: int) -> tuple[dict, dict, Optional[str]]:
    """`synthesize`, and a note when the rows drawn are not the `n` asked for."""
    from qvr.runtime.errors import PlateRowsError
    try:
        return (*_synthesize(model, n), None)
    except (DataError, RuntimeError) as exc:
        # A program whose data the domain object sizes (`program p : School -> School`
        # with `data sigma : School`, a `factor` over the domain: extension E9) cannot
        # draw other row counts; draw the domain's rows instead, as for plates above.
        return _at_domain_rows(model, n, exc if isinstance(exc, DataError) else DataError(
            f"synthetic data cannot be drawn from this program: {exc}"))
    except _PlateRows as exc:
        if exc.error.rows != n:  # not the rows: an argument of another size
            return _at_domain_rows(model, n, exc.data_error)
        plate, name = exc.error.plate, exc.error.plate_name
        try:
            data, truth = _synthesize(model, plate)
        except (_PlateRows, PlateRowsError) as again:  # two plates of other sizes
            err = getattr(again, "data_error", None)
            raise (err or DataError(message_of(again))) from None
        return data, truth, (f"drew {plate} synthetic rows instead of {n}: the plate "
                             f"`{name}` of `{exc.error.site}` reads row data, so it needs "
                             f"one row per element of `{name}`")


def _at_domain_rows(model, n: int, error: DataError) -> tuple:
    """`_synthesize_rows` at the size of the program's domain object, or `error`."""
    dom = getattr(model, "domain", None)
    size = dom.size if dom is not None and dom.is_discrete and dom.width == 1 else None
    if size is None or size == n:
        raise error from None
    try:
        data, truth, _ = _synthesize_rows(model, size)
    except (DataError, RuntimeError):
        raise error from None
    return data, truth, (f"drew {size} synthetic rows instead of {n}: the program's data "
                         f"is sized by its domain `{dom}` ({size} elements)")


class _PlateRows(Exception):
    def __init__(self, error, data_error):
        super().__init__(str(error))
        self.error, self.data_error = error, data_error


def _synthesize(model, n: int) -> tuple[dict, dict]:
    from qvr.inference.trace import trace
    from qvr.runtime.errors import MissingValueError, PlateRowsError, QvrRuntimeError
    dom = model.domain
    try:
        if callable(getattr(model, "synthetic_input", None)):  # e.g. an exported scan
            x = model.synthetic_input(n)
        elif dom.is_discrete and dom.width == 1:
            x = torch.randint(0, dom.size, (n, 1))
        elif dom.is_continuous:
            x = torch.randn(n, dom.width)
        else:
            x = torch.zeros(n, 1)
    except (TypeError, AttributeError):
        x = torch.zeros(n, 1)
    from qvr.runtime.synth_host import synthesizing_host
    try:
        with torch.no_grad(), synthesizing_host() as synth:
            tr = trace(model, x)
    except MissingValueError as exc:
        raise DataError(f"synthetic data cannot be drawn from this program: "
                        f"{message_of(exc)}; give the data in a file (--data FILE)") from None
    except (QvrRuntimeError, NotImplementedError, ValueError) as exc:
        err = DataError(f"synthetic data cannot be drawn from this program: "
                        f"{message_of(exc)}")
        if isinstance(exc, PlateRowsError):
            raise _PlateRows(exc, err) from None
        raise err from None
    except TypeError:
        pending = [n for n in synth.requested if n not in synth.values]
        if not pending:
            raise
        raise DataError(f"synthetic data cannot be drawn from this program: host data "
                        f"`{pending[0]}` is used in a way its values cannot be drawn from "
                        f"(not as an index or a number); give it in a data file "
                        f"(--data FILE)") from None
    data, truth = {"x" if not reads_host(model, "x") else INPUT_KEY: x}, {}
    from qvr.runtime.computed import computed_sites
    computed = computed_sites(model)
    for name, site in tr.sites.items():
        if not isinstance(site.value, torch.Tensor):
            continue
        if site.kind == "host":  # host data drawn for the synthetic rows
            data[name] = site.value.detach()
            continue
        if site.is_deterministic or name in computed:  # E9.7: computed from the data
            continue
        (data if site.kind == "observe" else truth)[name] = site.value.detach()
    for name, value in synth.values.items():  # host data drawn from how it is used
        data[name] = value
    return data, truth


def numpy_dict(values: dict) -> dict[str, Any]:
    return {k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v))
            for k, v in values.items()}

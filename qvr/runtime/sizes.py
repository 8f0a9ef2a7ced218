"""Sizes read from the data (docs/extensions.md, "Sizes from the data"; issue 36).

`object Child : FinSet N` (or `Real N`) names a size `N` that the program does not fix: a
module whose objects have such sizes is checked with `N` as a name (two objects of size
`N` are the same set), and compiled only once `N` is known.  The one function that binds
them is `qvr.runtime.load.bind_sizes(program, data, sizes)` (beside the compile, which it
calls: this module never imports `load`); everything here serves it:

* `size_objects(tm)` — `{N: [objects of size N]}` of a checked module, in order;
* `sized_values(tm)` — where each size shows in the data: ``(key, axis, object)`` for every
  `data`, `observe` and `sample` step typed by an object of that size (`axis` counted
  from the right, as values' axes are trailing);
* `resolve_sizes(tm, data, sizes)` — the size of each name: `sizes` (given by the user:
  ``--size N=100``, `FitConfig.sizes`), the data's `N` entry (a Stan data file has it),
  the size of the values typed by the objects of size `N` — all that are given must
  agree (`SizeError` names each source and its value);
* `bind_types(tm, sizes)` — the checked module with every `FinSet N` made `FinSet 434`:
  what `compile_module` compiles (nothing else in the runtime knows of size names);
* `UnboundProgram` / `SizedExport` — what `qvr.load` returns for such a module without
  data or sizes: its exports are compiled by `bind_sizes` (`fit` does it with the fit's
  data: the data file, the mapping given, the shipped data, or `FitConfig.sizes` for
  synthetic data).

A bound `Program` keeps `typed`, `relations` and `sizes` (`{N: 434}`); every export it
compiled keeps them as ``qvr_binding`` (`Binding`; `bound_sizes(export)` reads them).  So a program fitted on one data set is re-bound on
another — a refit, a fold of k-fold, prediction on new rows — by calling
`bind_sizes(program, new_data)` again: a new `Program`, with fresh parameters whose
shapes follow the new sizes (load the fitted values into it by name where their shapes
agree; parameters typed by `N`-sized objects are per row and have no value for new rows).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from qvr.runtime.errors import QvrError
from qvr.sema import types as T
from qvr.sema.symbols import ObjectSym
from qvr.syntax import ast as A


class SizeError(QvrError, ValueError):
    """A size read from the data is missing, not a whole number, or given twice with two
    values."""


# ---------------------------------------------------------------- what the module needs

def size_objects(tm) -> dict:
    """``{N: [object names]}``: the objects whose size is the name `N` (declaration order)."""
    out: dict = {}
    for td in tm.decls:
        d = td.decl
        if isinstance(d, A.ObjectDecl) and isinstance(d.type, A.TSize):
            sym = tm.symbol("type", d.name.text)
            if isinstance(sym, ObjectSym) and T.is_sized(sym.type):
                for n in T.size_names(sym.type):
                    out.setdefault(n, []).append(d.name.text)
    return out


def _steps(body):
    for s in body:
        yield s
        inner = getattr(s, "body", None)
        if inner:
            yield from _steps(inner)


def _type_factors(t) -> list:
    if isinstance(t, A.TParen):
        return _type_factors(t.inner)
    if isinstance(t, A.TProd):
        return [x for f in t.factors for x in _type_factors(f)]
    return [t]


def sized_values(tm) -> dict:
    """``{N: [(key, axis, object)]}``: the data values typed by objects of size `N` (a
    `data` step's type, an `observe`/`sample` step's annotation), `axis` counted from the
    right (-1 is the last axis)."""
    owners = {o: n for n, objs in size_objects(tm).items() for o in objs}
    out: dict = {}
    seen = set()
    for td in tm.decls:
        d = td.decl
        if not isinstance(d, A.ProgramDecl):
            continue
        for s in _steps(d.body):
            if isinstance(s, A.DataStep):
                key, t = s.bind.text, s.type
            elif isinstance(s, (A.ObserveStep, A.SampleStep)) and isinstance(s.bind, A.Name):
                key, t = s.bind.text, s.index
            else:
                continue
            if t is None:
                continue
            factors = _type_factors(t)
            for i, f in enumerate(factors):
                if isinstance(f, A.TName) and f.name.text in owners:
                    n = owners[f.name.text]
                    item = (key, i - len(factors), f.name.text)
                    if (n, item) not in seen:
                        seen.add((n, item))
                        out.setdefault(n, []).append(item)
    return out


def row_sizes(tm) -> list:
    """The size names that count rows: the first factor of an `observe` step's
    annotation is an object of that size (`observe y : Row` with `Row : FinSet N`).
    Synthetic data of R rows gives them R when no size is given (`fit`)."""
    owners = {o: n for n, objs in size_objects(tm).items() for o in objs}
    out = []
    for td in tm.decls:
        if isinstance(td.decl, A.ProgramDecl):
            for s in _steps(td.decl.body):
                if isinstance(s, A.ObserveStep) and s.index is not None:
                    f = _type_factors(s.index)[0]
                    if isinstance(f, A.TName) and owners.get(f.name.text) not in (None, *out):
                        out.append(owners[f.name.text])
    return out


# ---------------------------------------------------------------- the sizes of one data set

def _shape(v) -> Optional[tuple]:
    shape = getattr(v, "shape", None)
    if shape is not None:
        return tuple(int(s) for s in shape)
    if isinstance(v, (list, tuple)) and not (v and isinstance(v[0], str)):
        import numpy as np
        try:
            return tuple(np.shape(v))
        except ValueError:  # ragged
            return None
    return None


def _entry_size(name: str, v, objs: list) -> int:
    """The data's `N` entry as a size: a whole number of at least 1."""
    import numpy as np
    what = f"the data's `{name}` entry (the size of {_list(objs)})"
    try:
        a = np.asarray(v.detach().cpu() if hasattr(v, "detach") else v)
    except Exception:  # an object numpy cannot read
        raise SizeError(f"{what} must be a whole number, got {v!r}") from None
    if a.size != 1 or a.dtype.kind not in "iuf" or not float(a.reshape(-1)[0]).is_integer():
        shown = a.tolist() if a.size <= 3 else f"an array of shape {a.shape}"
        raise SizeError(f"{what} must be a whole number, got {shown}")
    n = int(a.reshape(-1)[0])
    if n < 1:
        raise SizeError(f"{what} must be at least 1, got {n}")
    return n


def _list(objs) -> str:
    return ", ".join(f"`{o}`" for o in objs)


def resolve_sizes(tm, data: Optional[dict] = None, sizes: Optional[dict] = None,
                  require: bool = True) -> dict:
    """``{N: size}`` for every size name of the module (see the module docstring).

    Every source that gives `N` must agree: the user's `sizes`, the data's `N` entry, and
    the size of each value typed by an object of size `N` (the axis that object types).
    `require=False` leaves out the names nothing gives instead of raising `SizeError`."""
    data = dict(data or {})
    sizes = dict(sizes or {})
    objects = size_objects(tm)
    values = sized_values(tm)
    unknown = [k for k in sizes if k not in objects]
    if unknown:
        names = ", ".join(f"`{n}`" for n in objects) or "none"
        raise SizeError(f"the program has no size named {_list(unknown)} "
                        f"(its sizes read from the data: {names})")
    out = {}
    for n, objs in objects.items():
        found = []  # (source, value)
        if n in sizes:
            try:
                v = _entry_size(n, sizes[n], objs)
            except SizeError as exc:
                raise SizeError(str(exc).replace(f"the data's `{n}` entry",
                                                 f"the size given for `{n}`")) from None
            found.append((f"it is given as {v} (--size {n}={v}, FitConfig.sizes)", v))
        if n in data:
            v = _entry_size(n, data[n], objs)
            found.append((f"the data's `{n}` entry is {v}", v))
        for key, axis, obj in values.get(n, []):
            if key not in data:
                continue
            shape = _shape(data[key])
            if shape is None or len(shape) < -axis:
                continue  # the one data check reports a value of the wrong rank
            m = shape[axis]
            where = (("row" if m == 1 else "rows") if axis == -len(shape) else
                     f"{'entry' if m == 1 else 'entries'} along axis {len(shape) + axis}")
            found.append((f"`{key}` (typed by `{obj}`) has {shape[axis]} {where}",
                          shape[axis]))
        if not found:
            if not require:
                continue
            typed = [k for k, _, _ in values.get(n, [])]
            by = f", or give the values typed by {_list(objs)} ({_list(dict.fromkeys(typed))})" \
                if typed else ""
            raise SizeError(f"the size `{n}` of {_list(objs)} is not in the data: give it as "
                            f"the data's `{n}` entry{by}; without data, give it with "
                            f"--size {n}=SIZE (FitConfig.sizes)")
        first = found[0][1]
        if any(v != first for _, v in found):
            said = "; ".join(s for s, _ in found)
            raise SizeError(f"the size `{n}` of {_list(objs)} disagrees in the data: {said}")
        out[n] = first
    return out


# ---------------------------------------------------------------- the module with sizes bound

def _bind(x, sizes: dict):
    if isinstance(x, T.Named):
        return T.Named(x.name, _bind(x.target, sizes))
    if isinstance(x, T.FinSet):
        return T.FinSet(sizes[x.n]) if isinstance(x.n, str) else x
    if isinstance(x, T.Real):
        if isinstance(x.n, str):
            return dataclasses.replace(x, n=sizes[x.n])
        return x
    if isinstance(x, T.Prod):
        return T.Prod(tuple(_bind(f, sizes) for f in x.factors))
    if isinstance(x, T.MorType):
        return T.MorType(_bind(x.dom, sizes), _bind(x.cod, sizes))
    return x


def _bind_symbol(sym, sizes: dict):
    ty = getattr(sym, "type", None)
    if ty is None or not dataclasses.is_dataclass(sym):
        return sym
    bound = _bind(ty, sizes)
    return sym if bound == ty else dataclasses.replace(sym, type=bound)


def bind_types(tm, sizes: dict):
    """A copy of the checked module `tm` whose symbols have every size name replaced by
    its value in `sizes` (`FinSet N` -> `FinSet 434`): what the runtime compiles."""
    decls = [dataclasses.replace(td, bindings={k: _bind_symbol(s, sizes)
                                               for k, s in td.bindings.items()})
             for td in tm.decls]
    symbols = {k: _bind_symbol(s, sizes) for k, s in tm._symbols.items()}
    return dataclasses.replace(tm, decls=decls, _symbols=symbols)


# ---------------------------------------------------------------- a module not yet bound

class SizedExport:
    """An export of a module whose sizes are read from the data, before they are: `fit`
    binds it with its data (`bind_sizes`); it cannot run on its own."""

    def __init__(self, owner: "UnboundProgram", name: str, kind: str):
        self.owner = owner
        self.name = name
        self.label = name
        self.kind = kind  # program | morphism | template (what the bound export will be)
        self.path = owner.path
        self.source = owner.source

    @property
    def size_names(self) -> tuple:
        return self.owner.size_names

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(
            f"`{self.name}` has sizes read from the data ({', '.join(self.size_names)}): "
            f"bind them first (qvr.runtime.bind_sizes(export, data) or "
            f"qvr.load(path, data=..., sizes=...)); `.{attr}` exists once bound")

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}: sizes {', '.join(self.size_names)} from the data>"


class UnboundProgram:
    """What `qvr.load` returns for a module with sizes read from the data when neither its
    data nor `sizes` fix them: `exports` maps each export name to a `SizedExport`."""

    def __init__(self, tm, relations: Optional[dict], path: str, source: Optional[str],
                 kinds: dict):
        self.typed = tm
        self.relations = dict(relations or {})
        self.path = path
        self.source = source
        self.size_names = tuple(size_objects(tm))
        self.sizes = {}
        self.exports = {name: SizedExport(self, name, kind) for name, kind in kinds.items()}
        # as `Program.morphism`: the first export (a program or morphism), here unbound —
        # `fit(qvr.load(path).morphism, data)` binds it; any other use says how to bind it
        first = next(iter(self.exports.values()), None)
        self.morphism = first if first is not None and first.kind != "template" else None

    def __repr__(self) -> str:
        return (f"UnboundProgram(path={self.path!r}, exports={list(self.exports)}, "
                f"sizes from the data: {', '.join(self.size_names)})")


def export_kinds(tm) -> dict:
    """``{export name: program | morphism | template}`` of a checked module (by symbol)."""
    from qvr.sema.symbols import ProgramSym
    out = {}
    for name, _e, _td in tm.exports():
        key = name if name is not None else f"export{len(out)}"
        sym = tm.symbol("value", name) if name is not None else None
        kind = "morphism"
        if isinstance(sym, ProgramSym):
            kind = "template" if sym.parametric else "program"
        out[key] = kind
    return out


@dataclasses.dataclass(frozen=True)
class Binding:
    """What a compiled export keeps of its module (as ``export.qvr_binding``) so that
    `bind_sizes` can compile it again with other sizes."""

    typed: object  # the checked module, sizes unbound
    relations: dict
    name: str
    sizes: dict

    def __deepcopy__(self, memo):  # immutable: a copied model shares it
        return self


def bound_sizes(program) -> dict:
    """``{N: size}`` a compiled module or export was bound with (empty: none)."""
    b = getattr(program, "qvr_binding", None)
    if b is not None:
        return dict(b.sizes)
    return dict(getattr(program, "sizes", None) or {})


def needs_sizes(program) -> bool:
    """Whether `program` (a module or an export) waits for sizes from the data."""
    return isinstance(program, (SizedExport, UnboundProgram))

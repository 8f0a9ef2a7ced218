"""Data files that ship with programs: where they are and how they read (numpy only).

Convention: the data of ``DIR/NAME.qvr`` is ``DIR/data/NAME.json`` (else
``DIR/data/NAME.npz``), and its vocabulary, for token programs, ``DIR/data/NAME.vocab.json``.

* A data file maps names to arrays: observed site names and host-data names of the
  program's first export, ``x`` for the program input (``@input`` when the program
  reads host data named ``x``: `qvr.inference.data.fit_data.input_key`), and ``from_data/KEY`` for the
  tensor of an ``observed`` morphism's ``from_data("KEY")`` initializer (given to
  ``qvr.load(path, data=...)``, not to the fit; `split_relations` separates them).
  JSON values are numbers or rectangular nested lists of numbers (integers are read as
  int64, other numbers as float32, torch's default dtype — float64 for a float64 fit,
  ``load_data(path, floats="float64")``); a list of strings is kept as
  a string array (host data such as the `tokens` a deduction parses).  ``.npz`` arrays
  keep their stored dtype.  ``null`` in a list of numbers is a missing entry of an
  observed value (design E5): the array is then read as floats with NaN there, whether
  its other numbers are integers or not (float64 when an integer is too large for a
  float32 to hold exactly).  Decision: NaN, not -1, for integer lists too — the loader
  does not know whether the site is an index (where the runtime reads NaN, like -1, as
  missing) or a real value (where a -1 would silently be a number).
* A vocabulary is a JSON list of strings: index = token id, value = the character or word
  it stands for (special tokens spelled ``<eos>``).
* Fit options that suit the program, ``DIR/data/NAME.fit.json``: a JSON object of
  `FitConfig` fields (e.g. ``{"steps": 150, "draws": 8}``) used as the defaults of
  `qvr run` and of the dashboard's setup form; options of another method are ignored
  there, and anything given explicitly overrides them.

* Data larger than memory (issue 26): a folder of ``NAME.npy`` files or an ``.npz``
  whose members are stored is opened memory-mapped by `qvr.mapped_arrays.open_arrays`
  (each value a `MappedArray`, read row by row); `load_data` reads such a folder whole.

`load_data` also reads ``.pt`` files when torch is importable (torch is never imported
at module import).  Every problem is a `DataFileError` whose message names the file, the
key when there is one, and the cause.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional, Union

import numpy as np

from qvr.mapped_arrays import DataFileError, open_arrays

__all__ = ["DataFileError", "RELATION_PREFIX", "find_data", "find_fit_options", "find_vocab",
           "load_fit_options", "load_data", "load_vocab", "split_relations"]

DATA_DIR = "data"
DATA_SUFFIXES = (".json", ".npz")  # searched in this order
VOCAB_SUFFIX = ".vocab.json"
FIT_SUFFIX = ".fit.json"
RELATION_PREFIX = "from_data/"

PathLike = Union[str, Path]


def find_data(program_path: PathLike) -> Optional[Path]:
    """``<program dir>/data/<stem>.json`` (else ``.npz``) if it exists, else None."""
    p = Path(program_path)
    for suffix in DATA_SUFFIXES:
        candidate = p.parent / DATA_DIR / (p.stem + suffix)
        if candidate.is_file():
            return candidate
    return None


def find_vocab(program_path: PathLike) -> Optional[Path]:
    """``<program dir>/data/<stem>.vocab.json`` if it exists, else None."""
    p = Path(program_path)
    candidate = p.parent / DATA_DIR / (p.stem + VOCAB_SUFFIX)
    return candidate if candidate.is_file() else None


def find_fit_options(program_path: PathLike) -> Optional[Path]:
    """``<program dir>/data/<stem>.fit.json`` if it exists, else None."""
    p = Path(program_path)
    candidate = p.parent / DATA_DIR / (p.stem + FIT_SUFFIX)
    return candidate if candidate.is_file() else None


def load_fit_options(path: PathLike) -> dict:
    """The fit options shipped beside a program: a JSON object (names are checked by the
    caller against `FitConfig`)."""
    obj = _read_json(Path(path))
    if not isinstance(obj, dict):
        raise DataFileError(f"{path}: fit options must be a JSON object of option names, "
                            f"found {_kind(obj)}")
    return obj


def load_vocab(path: PathLike) -> list[str]:
    """The token strings of a vocabulary file, by token id."""
    obj = _read_json(Path(path))
    if not isinstance(obj, list):
        raise DataFileError(f"{path}: a vocabulary must be a JSON list of strings "
                            f"(index = token id), found {_kind(obj)}")
    for i, tok in enumerate(obj):
        if not isinstance(tok, str):
            raise DataFileError(f"{path}: token id {i}: expected a string, found {_kind(tok)}")
    return list(obj)


def load_data(path: PathLike, floats: str = "float32") -> dict[str, np.ndarray]:
    """Arrays by name from a ``.json``, ``.npz`` or ``.pt`` data file, or a folder of
    ``NAME.npy`` files (read whole; `open_arrays` maps them instead).  `floats`: the dtype
    of JSON's non-integer numbers (``"float32"``, or ``"float64"`` for a float64 fit,
    `FitConfig.dtype`, so its decimal text is not rounded to float32 first)."""
    p = Path(path)
    if p.is_dir():
        return _load_npy_folder(p)
    suffix = p.suffix.lower()
    if suffix == ".json":
        obj = _read_json(p)
        if not isinstance(obj, dict):
            raise DataFileError(f"{p}: expected a JSON object mapping names to arrays, "
                                f"found {_kind(obj)}")
        return {str(k): _json_array(v, p, str(k), floats) for k, v in obj.items()}
    if suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as f:
                keys = list(f.files)
                out = {}
                for k in keys:
                    try:
                        out[k] = f[k]
                    except ValueError as exc:  # object arrays need pickle
                        raise DataFileError(f"{p}: key `{k}`: cannot read the array ({exc})") \
                            from None
                return out
        except DataFileError:
            raise
        except Exception as exc:
            raise DataFileError(f"{p}: cannot read: {exc}") from None
    if suffix == ".pt":
        return _load_pt(p)
    raise DataFileError(f"{p}: unknown data format `{p.suffix or '(no suffix)'}` "
                        "(expected .json, .npz or .pt)")


def _load_npy_folder(p: Path) -> dict[str, np.ndarray]:
    """A folder of ``NAME.npy`` files read whole (the same checks as `open_arrays`)."""
    return {k: np.asarray(a) for k, a in open_arrays(p).items()}


def split_relations(data: dict) -> tuple[dict, dict]:
    """`(relations, rest)`: the ``from_data/KEY`` entries as ``{KEY: array}`` (for
    ``qvr.load(path, data=relations)``) and everything else (for the fit)."""
    relations, rest = {}, {}
    for k, v in data.items():
        if k.startswith(RELATION_PREFIX):
            relations[k[len(RELATION_PREFIX):]] = v
        else:
            rest[k] = v
    return relations, rest


# ---------------------------------------------------------------- helpers


def _read_json(p: Path):
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{p}: cannot read: {_os_cause(exc)}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None


def _os_cause(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"
    if isinstance(v, str):
        return f"the string {v!r}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _json_array(value, p: Path, key: str, floats: str = "float32") -> np.ndarray:
    leaves: list = []
    _shape(value, (), leaves, p, key)
    strings = [w for w, leaf in leaves if isinstance(leaf, str)]
    if strings and len(strings) != len(leaves):
        where, leaf = next((w, leaf) for w, leaf in leaves if not isinstance(leaf, str))
        what = "a null" if leaf is None else "a number"
        raise DataFileError(f"{p}: key `{key}`: mixes strings and numbers ({what} at "
                            f"{_where(where)}, a string at {_where(strings[0])})")
    if strings:
        return np.array(value, dtype=str)
    if any(leaf is None for _, leaf in leaves):
        big = any(isinstance(leaf, int) and not isinstance(leaf, bool) and abs(leaf) > 2 ** 24
                  for _, leaf in leaves)
        return np.array(_nan_for_null(value),
                        dtype=np.float64 if big or floats == "float64" else np.float32)
    arr = np.array(value)
    # JSON numbers are decimal text: floats become float32, torch's default dtype (the
    # runtime computes in it; a float64 input would not meet float32 parameters), or
    # float64 for a float64 fit (`floats`)
    return arr.astype(np.dtype(floats)) if arr.dtype.kind == "f" else arr


def _shape(v, where: tuple, leaves: list, p: Path, key: str) -> tuple:
    if isinstance(v, list):
        shapes = [_shape(e, where + (i,), leaves, p, key) for i, e in enumerate(v)]
        for i, s in enumerate(shapes[1:], 1):
            if s != shapes[0]:
                raise DataFileError(
                    f"{p}: key `{key}`: ragged lists: {_where(where + (0,))} has shape "
                    f"{shapes[0]} but {_where(where + (i,))} has shape {s} "
                    "(every row must have the same length)")
        return (len(v),) + (shapes[0] if shapes else ())
    if v is None or isinstance(v, (bool, int, float, str)):
        leaves.append((where, v))
        return ()
    raise DataFileError(f"{p}: key `{key}`: non-numeric value {_kind(v)} at {_where(where)}")


def _nan_for_null(v):
    """`v` (nested lists) with every `null` replaced by NaN."""
    if isinstance(v, list):
        return [_nan_for_null(e) for e in v]
    return math.nan if v is None else v


def _where(where: tuple) -> str:
    return "[" + ", ".join(str(i) for i in where) + "]" if where else "the top level"


def _load_pt(p: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise DataFileError(f"{p}: reading .pt files needs torch, which is not "
                            "installed") from None
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise DataFileError(f"{p}: cannot read: {_os_cause(exc)}") from None
    if not isinstance(obj, dict):
        raise DataFileError(f"{p}: expected a mapping from names to tensors, "
                            f"found {type(obj).__name__}")
    out = {}
    for k, v in obj.items():
        try:
            out[str(k)] = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) \
                else np.asarray(v)
        except Exception as exc:
            raise DataFileError(f"{p}: key `{k}`: not an array ({exc})") from None
    return out

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

* Data larger than memory (issue 26): a folder of ``NAME.npy`` files (one per key:
  ``DIR/x.npy``, ``DIR/next_token.npy``) or an ``.npz`` whose members are stored
  (``np.savez``, not ``np.savez_compressed``) can be opened memory-mapped
  (`open_arrays`): each value is a `MappedArray`, read-only, of which only the rows
  asked for are copied into memory (`MappedArray.rows`, `MappedArray.chunks`), so a
  minibatch fit's memory is bounded by the batch, not the file.  One open file and one
  ``mmap`` per file (the members of an ``.npz`` share them).  Decision: rows are read
  with positional file reads (``os.pread``), not copied out of the mapping — on current
  Linux one fault maps a whole large folio (about 2 MB per row on ext4, kernel 6.18), so
  256 random rows copied out of a mapping made a 200 MB file resident for the call even
  when its pages were dropped (``madvise(MADV_DONTNEED)``) right after; read pages sit
  in the OS page cache, which is not the process's memory.  The mapping serves
  Fortran-ordered arrays (and systems without ``os.pread``), its pages dropped after
  each read.  Decision: a compressed member is an error, not a silent read into memory
  — it cannot be mapped.  `load_data` reads such a folder whole.

`load_data` also reads ``.pt`` files when torch is importable (torch is never imported
at module import).  Every problem is a `DataFileError` whose message names the file, the
key when there is one, and the cause.
"""
from __future__ import annotations

import io
import json
import math
import mmap
import os
import struct
import zipfile
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

__all__ = ["DataFileError", "MappedArray", "RELATION_PREFIX", "find_data", "find_fit_options",
           "find_vocab", "load_fit_options", "load_data", "load_vocab", "open_arrays",
           "split_relations"]

DATA_DIR = "data"
DATA_SUFFIXES = (".json", ".npz")  # searched in this order
VOCAB_SUFFIX = ".vocab.json"
FIT_SUFFIX = ".fit.json"
RELATION_PREFIX = "from_data/"

PathLike = Union[str, Path]


class DataFileError(ValueError):
    """A data or vocabulary file that cannot be used (the message says which and why)."""


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


# ---------------------------------------------------------------- memory-mapped arrays

#: the default size of a block of `MappedArray.chunks` (bytes)
CHUNK_BYTES = 16 * 2 ** 20


class _Mapping:
    """One open file and one read-only mmap of it (shared by the members of an .npz).

    Rows are read with positional reads (``os.pread``, ``os.preadv``), not
    through the mapping: on current Linux a fault in a file mapping maps a whole large
    folio of the page cache (measured: about 2 MB per row touched on ext4, kernel 6.18),
    so copying 256 random rows out of the mapping made the whole file resident for the
    duration of the call; file reads put pages in the page cache, which is not the
    process's memory.  The mapping serves where reads cannot (Fortran-ordered arrays, no
    ``os.pread``), its pages dropped after each use."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = -1
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            self.size = os.fstat(self.fd).st_size
            if self.size == 0:
                raise DataFileError(f"{path}: the file is empty (not a .npy or .npz file)")
            self.mm = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            self.close()
            raise DataFileError(f"{path}: cannot read: {_os_cause(exc)}") from None
        except DataFileError:
            self.close()
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def read_into(self, buf: memoryview, offset: int) -> None:
        """Fill `buf` (bytes) from the file at `offset`."""
        done, n = 0, len(buf)
        while done < n:
            got = os.preadv(self.fd, [buf[done:done + (1 << 30)]], offset + done)
            if got <= 0:
                raise DataFileError(f"{self.path}: the file ended at byte {offset + done} "
                                    f"(it was truncated after it was opened)")
            done += got

    def pread(self, offset: int, n: int) -> bytes:
        """`n` bytes of the file at `offset`."""
        data = os.pread(self.fd, n, offset)
        if len(data) < n:  # a read stops at 2 GB; or the file shrank
            rest = bytearray(n - len(data))
            self.read_into(memoryview(rest), offset + len(data))
            data += rest
        return data

    def release(self, start: int = 0, stop: Optional[int] = None) -> None:
        """Drop the mapped pages of bytes [start, stop) from this process (the file's
        pages stay in the page cache; the next read faults them in again)."""
        if not hasattr(self.mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
            return  # not Linux/BSD/macOS: the pages stay until the OS reclaims them
        stop = self.size if stop is None else min(int(stop), self.size)
        start = max(0, int(start)) // mmap.PAGESIZE * mmap.PAGESIZE
        if stop > start:
            try:
                self.mm.madvise(mmap.MADV_DONTNEED, start, stop - start)
            except (OSError, ValueError):
                pass  # advice only


#: rows whose gap is under this many bytes are read in one read (the gap is discarded)
_GAP_BYTES = 4096


class MappedArray:
    """An array in a .npy file (or a stored, uncompressed member of an .npz) mapped
    read-only; never read whole unless asked.

    `rows(idx)` and `chunks()` return in-memory copies read from the file, so the
    process's resident memory is bounded by what one call returns, not by the file (the
    file's pages sit in the OS page cache, which is not the process's memory; see
    `_Mapping`).  `np.asarray(a)` reads it whole.  A `MappedArray` pickles as its path
    and key (it is reopened where it is unpickled)."""

    def __init__(self, mapping: _Mapping, key: str, offset: int, shape: tuple,
                 dtype: np.dtype, fortran_order: bool, member: Optional[str] = None):
        self._mapping = mapping
        self.path = str(mapping.path)
        self.key = key
        self.member = member  # the .npz member name, None for a .npy file
        self.offset = int(offset)  # where the data starts in the file
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.fortran_order = bool(fortran_order)
        self._view = np.ndarray(self.shape, self.dtype, buffer=mapping.mm, offset=self.offset,
                                order="F" if fortran_order else "C")
        # C-ordered rows are contiguous byte ranges: read them from the file
        self._reads = not self.fortran_order or self.ndim <= 1
        self._reads = self._reads and hasattr(os, "preadv") and hasattr(os, "pread")

    # ---- array-like facts
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def row_nbytes(self) -> int:
        """Bytes of one row (one index along axis 0)."""
        return (self.size // self.shape[0] if self.ndim and self.shape[0] else 0) \
            * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d mapped array")
        return self.shape[0]

    def __repr__(self) -> str:
        where = f"{self.path}:{self.member}" if self.member else self.path
        return f"MappedArray({where!r}, shape={self.shape}, dtype={self.dtype.str!r})"

    def __reduce__(self):
        return (_reopen, (self.path, self.key))

    # ---- reading
    def rows(self, idx) -> np.ndarray:
        """A new in-memory array of the rows `idx` (a 1-D array of row indices, in any
        order, repeats allowed, negative ones counted from the end; or a slice)."""
        if not self.shape:
            raise TypeError("rows() of a 0-d mapped array (use np.asarray)")
        n = self.shape[0]
        if isinstance(idx, slice):
            start, stop, step = idx.indices(n)
            if step == 1:
                return self._block(start, max(start, stop))
            idx = np.arange(start, stop, step)
        idx = np.asarray(idx)
        if idx.ndim > 1:
            raise ValueError(f"rows(): row indices must be a 1-D array, got shape {idx.shape}")
        if idx.dtype.kind not in "iu" and not (idx.size == 0 and idx.dtype.kind == "f"):
            raise TypeError(f"rows(): row indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        if idx.size == 0:
            return np.empty((0,) + self.shape[1:], self.dtype)
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -n or hi >= n:
            bad = lo if lo < -n else hi
            raise IndexError(f"rows(): index {bad} is out of bounds for {n} rows "
                             f"(`{self.key}`)")
        if lo < 0:
            idx = np.where(idx < 0, idx + n, idx)
        # read the file in order, each row once; then put the rows in the order asked
        uniq, inverse = np.unique(idx, return_inverse=True)
        got = self._read_rows(uniq)
        if uniq.size == idx.size and bool(np.all(uniq == idx)):
            return got
        return got[inverse.reshape(-1)]

    def chunks(self, rows: Optional[int] = None) -> Iterator[np.ndarray]:
        """The whole array as in-memory copies of consecutive blocks of `rows` rows (by
        default about 16 MB each).  A 0-d or empty array is one block."""
        if not self.shape or self.shape[0] == 0:
            yield np.asarray(self)
            return
        n = self.shape[0]
        if rows is None:
            rows = max(1, CHUNK_BYTES // max(1, self.row_nbytes))
        rows = max(1, int(rows))
        for start in range(0, n, rows):
            yield self._block(start, min(n, start + rows))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The whole array in memory (a copy: ``copy=False`` cannot be honoured)."""
        if copy is False:
            raise ValueError(f"{self!r}: reading a mapped array into memory needs a copy")
        if self._reads:
            a = np.empty(self.shape, self.dtype)
            self._mapping.read_into(_bytes_of(a), self.offset)
        else:
            try:
                a = np.array(self._view)
            finally:
                self.release()
        return a if dtype is None else a.astype(dtype, copy=False)

    def release(self) -> None:
        """Drop this array's mapped pages from the process now (reads through the
        mapping drop them themselves; this is for code that used it otherwise)."""
        self._mapping.release(self.offset, self.offset + self.nbytes)

    def _block(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) in memory."""
        if not self._reads:
            try:
                return np.array(self._view[start:stop])
            finally:
                self.release()
        out = np.empty((stop - start,) + self.shape[1:], self.dtype)
        self._mapping.read_into(_bytes_of(out), self.offset + start * self.row_nbytes)
        return out

    def _read_rows(self, uniq: np.ndarray) -> np.ndarray:
        """The rows `uniq` (sorted, distinct, in range) in memory: one read per run of
        rows close together (a gap under `_GAP_BYTES` is read and dropped)."""
        if not self._reads:
            try:
                return self._view[uniq]
            finally:
                self.release()
        rb = self.row_nbytes
        if rb == 0:
            return np.empty((len(uniq),) + self.shape[1:], self.dtype)
        breaks = np.flatnonzero(np.diff(uniq) > max(1, _GAP_BYTES // rb)) + 1
        starts = np.concatenate(([0], breaks))
        first = uniq[starts]
        span = uniq[np.concatenate((breaks, [len(uniq)])) - 1] - first + 1
        pread = self._mapping.pread
        data = b"".join([pread(self.offset + f * rb, s * rb)
                         for f, s in zip(first.tolist(), span.tolist())])
        # the position of each row asked for in the rows read
        run = np.repeat(np.arange(len(starts)), np.diff(np.concatenate((starts, [len(uniq)]))))
        pos = (np.cumsum(span) - span)[run] + (uniq - first[run])
        out = np.frombuffer(data, np.uint8).reshape(-1, rb)[pos]  # a new, writable array
        return out.view(self.dtype).reshape((len(uniq),) + self.shape[1:])


def _bytes_of(a: np.ndarray) -> memoryview:
    """The bytes of a new C-contiguous array, writable."""
    return memoryview(a.reshape(-1).view(np.uint8))


def open_arrays(path: PathLike) -> dict[str, MappedArray]:
    """The arrays of a folder of ``NAME.npy`` files (every ``*.npy`` in it, by name; other
    files are ignored) or of an ``.npz`` whose members are stored (written by ``np.savez``,
    not ``np.savez_compressed``), memory-mapped read-only: nothing is read but the
    headers.  A compressed member, a bad header or a truncated file is a
    `DataFileError` naming the file (and member)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".npy" and f.is_file())
        if not files:
            raise DataFileError(f"{p}: the folder holds no .npy files (expected one NAME.npy "
                                "per data key)")
        return {f.stem: _open_npy(f) for f in files}
    if not p.exists():
        raise DataFileError(f"{p}: no such file or folder")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        return {p.stem: _open_npy(p)}
    if suffix == ".npz":
        return _open_npz(p)
    raise DataFileError(f"{p}: cannot be memory-mapped: expected a folder of .npy files, "
                        f"a .npy or an .npz file, not `{p.suffix or '(no suffix)'}`")


def _reopen(path: str, key: str) -> MappedArray:
    return open_arrays(path)[key]


def _open_npy(p: Path) -> MappedArray:
    mapping = _Mapping(p)
    offset, shape, dtype, fortran = _npy_header(mapping, 0, p, None)
    return _mapped(mapping, p.stem, offset, shape, dtype, fortran, None, mapping.size)


def _open_npz(p: Path) -> dict[str, MappedArray]:
    try:
        with zipfile.ZipFile(p) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise DataFileError(f"{p}: cannot read: not an .npz archive "
                            f"({_os_cause(exc)})") from None
    members = [i for i in infos if i.filename.endswith(".npy")]
    if not members:
        raise DataFileError(f"{p}: the archive holds no .npy members")
    mapping = _Mapping(p)
    out = {}
    for info in members:
        name = info.filename
        if info.compress_type != zipfile.ZIP_STORED:
            raise DataFileError(
                f"{p}: member `{name}` is compressed, so it cannot be memory-mapped: write "
                f"the file with np.savez (not np.savez_compressed), or give a folder of "
                f".npy files (one NAME.npy per key)")
        if info.flag_bits & 0x1:
            raise DataFileError(f"{p}: member `{name}` is encrypted")
        local = info.header_offset
        head = mapping.mm[local:local + 30]
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            raise DataFileError(f"{p}: member `{name}`: bad zip local header (the file is "
                                "damaged or truncated)")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        start = local + 30 + name_len + extra_len
        end = start + info.file_size
        if end > mapping.size:
            raise DataFileError(f"{p}: member `{name}` is truncated ({mapping.size - start} "
                                f"of {info.file_size} bytes present)")
        offset, shape, dtype, fortran = _npy_header(mapping, start, p, name)
        out[name[:-len(".npy")]] = _mapped(mapping, name[:-len(".npy")], offset, shape,
                                           dtype, fortran, name, end)
    return out


def _npy_header(mapping: _Mapping, start: int, p: Path, member: Optional[str]):
    """`(data offset, shape, dtype, fortran_order)` of the .npy at byte `start`."""
    where = f"{p}: member `{member}`" if member else f"{p}"
    f = io.BytesIO(mapping.mm[start:start + 65536 + 16])  # headers are far smaller
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except Exception as exc:
        raise DataFileError(f"{where}: not a .npy array (bad header: "
                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                            ) from None
    finally:
        mapping.release(start, start + 65536 + 16)
    if dtype.hasobject:
        raise DataFileError(f"{where}: holds Python objects (dtype {dtype}), which cannot be "
                            "memory-mapped: store numbers or fixed-width strings")
    return start + f.tell(), shape, dtype, fortran


def _mapped(mapping, key, offset, shape, dtype, fortran, member, end) -> MappedArray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset + nbytes > end:
        what = f"{mapping.path}: member `{member}`" if member else f"{mapping.path}"
        raise DataFileError(f"{what}: truncated: the header says shape {tuple(shape)} of "
                            f"{dtype} ({nbytes} bytes) but {max(0, end - offset)} bytes "
                            "follow it")
    return MappedArray(mapping, key, offset, shape, dtype, fortran, member)


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

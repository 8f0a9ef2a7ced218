"""Arrays read without loading them whole (issue 26): a folder of ``NAME.npy`` files, a
``.npy`` file, or an ``.npz`` whose members are stored, opened memory-mapped (numpy only).

A folder holds one ``NAME.npy`` per key (``DIR/x.npy``, ``DIR/next_token.npy``); an
``.npz`` must be written by ``np.savez``, not ``np.savez_compressed``.  `open_arrays` reads
only the headers: each value is a `MappedArray`, read-only, of which only the rows asked
for are copied into memory (`MappedArray.rows`, `MappedArray.chunks`), so a minibatch
fit's memory is bounded by the batch, not the file.  One open file and one ``mmap`` per
file (the members of an ``.npz`` share them).  Decision: rows are read with positional
file reads (``os.pread``), not copied out of the mapping — on current Linux one fault maps
a whole large folio (about 2 MB per row on ext4, kernel 6.18), so 256 random rows copied
out of a mapping made a 200 MB file resident for the call even when its pages were
dropped (``madvise(MADV_DONTNEED)``) right after; read pages sit in the OS page cache,
which is not the process's memory.  The mapping serves Fortran-ordered arrays (and
systems without ``os.pread``), its pages dropped after each read.  Decision: a compressed
member is an error, not a silent read into memory — it cannot be mapped.

`DataFileError` lives here, the lowest of the two data modules; `qvr.datafiles` (the data
shipped beside programs; its `load_data` reads such a folder whole) raises it too.  Every
problem is a `DataFileError` naming the file, the member when there is one, and the cause.
"""
from __future__ import annotations

import io
import mmap
import os
import struct
import zipfile
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

__all__ = ["CHUNK_BYTES", "DataFileError", "MappedArray", "open_arrays"]

PathLike = Union[str, Path]


class DataFileError(ValueError):
    """A data or vocabulary file that cannot be used (the message says which and why)."""


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


def _os_cause(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)

"""Data larger than memory (issue 26): `.npy` folders and stored `.npz` files opened
memory-mapped (`qvr.mapped_arrays.open_arrays`, `MappedArray`), read row by row with the
process's memory bounded by what is read; `load_data_file(mapped=...)`, `data_sha256`
over mapped values, and the large-corpus option of `examples/data/make_corpus.py`."""
import importlib
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr.datafiles import load_data
from qvr.mapped_arrays import DataFileError, MappedArray, open_arrays
from qvr.inference.data.fit_data import DataError, load_data_file, mapped_values
from qvr.inference.criticism.pointwise import data_sha256

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"


def _arrays():
    rng = np.random.default_rng(0)
    return {
        "x": rng.integers(0, 32, (300, 16)).astype(np.int16),
        "next_token": rng.integers(0, 32, (300, 16)).astype(np.int64),
        "y": rng.normal(size=(300, 2, 3)),
        "w": rng.normal(size=300).astype(np.float32),
        "flag": rng.random(300) < 0.5,
        "s": np.float64(2.5),
        "f": np.asfortranarray(rng.normal(size=(50, 4))),
        "e": np.zeros((0, 3), np.float32),
    }


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for k, v in _arrays().items():
        np.save(d / f"{k}.npy", v)
    (d / "README.txt").write_text("not an array")  # other files are ignored
    return d


@pytest.fixture
def npz(tmp_path):
    p = tmp_path / "data.npz"
    np.savez(p, **_arrays())
    return p


def _check_mapped(mapped):
    want = _arrays()
    assert sorted(mapped) == sorted(want)
    idx = np.array([299, 0, 7, 7, 150, -1, 3])
    for k, a in mapped.items():
        w = want[k]
        assert isinstance(a, MappedArray) and a.key == k
        assert a.shape == w.shape and a.dtype == w.dtype and a.ndim == w.ndim
        assert a.nbytes == w.nbytes
        whole = np.asarray(a)
        assert whole.dtype == w.dtype and np.array_equal(whole, w)
        if a.ndim == 0:
            with pytest.raises(TypeError):
                a.rows([0])
            continue
        assert len(a) == w.shape[0]
        if len(a) == 0:
            continue
        got = a.rows(idx % len(a))
        assert got.flags.writeable and got.flags.c_contiguous
        assert got.dtype == w.dtype and np.array_equal(got, w[idx % len(a)])  # order, repeats
        if len(a) == 300:  # negative rows count from the end
            assert np.array_equal(a.rows(idx), w[idx])
        a.release()
        assert np.array_equal(a.rows(np.arange(10, 20)), w[10:20])  # sorted, no repeats
        assert np.array_equal(a.rows(slice(5, 9)), w[5:9])
        assert a.rows(np.array([], dtype=np.int64)).shape == (0,) + w.shape[1:]


def test_a_folder_of_npy_maps_every_array(folder):
    mapped = open_arrays(folder)
    _check_mapped(mapped)
    assert mapped["x"].path == str(folder / "x.npy")


def test_a_stored_npz_maps_every_member(npz):
    mapped = open_arrays(npz)
    _check_mapped(mapped)
    assert mapped["x"].path == str(npz) and mapped["x"].member == "x.npy"


def test_rows_read_far_apart_and_close_together_agree_with_np_load(tmp_path):
    big = np.arange(20000 * 3, dtype=np.float64).reshape(20000, 3)
    np.save(tmp_path / "big.npy", big)
    a = open_arrays(tmp_path / "big.npy")["big"]
    rng = np.random.default_rng(1)
    for _ in range(20):  # random rows: runs of close rows read at once, gaps dropped
        idx = rng.integers(-20000, 20000, rng.integers(1, 600))
        assert np.array_equal(a.rows(idx), big[idx])
    with pytest.raises(IndexError, match="out of bounds"):
        a.rows([0, 20000])
    with pytest.raises(TypeError):
        a.rows(np.array([0.5]))
    with pytest.raises(ValueError, match="1-D"):
        a.rows(np.zeros((2, 2), dtype=int))


def test_chunks_reassemble_the_array(folder):
    mapped = open_arrays(folder)
    for k, w in _arrays().items():
        for rows in (None, 1, 7, 1000):
            blocks = list(mapped[k].chunks() if rows is None else mapped[k].chunks(rows))
            whole = np.concatenate(blocks) if w.ndim and len(blocks) > 1 else blocks[0]
            assert whole.shape == w.shape and np.array_equal(whole, w), (k, rows)
    assert [len(b) for b in mapped["x"].chunks(128)] == [128, 128, 44]


def test_a_mapped_array_pickles_as_its_path(folder, npz):
    for a in (open_arrays(folder)["y"], open_arrays(npz)["y"]):
        b = pickle.loads(pickle.dumps(a))
        assert b.shape == a.shape and np.array_equal(b.rows([4, 2]), a.rows([4, 2]))


def test_a_compressed_member_is_an_error_saying_how_to_fix_it(tmp_path):
    p = tmp_path / "packed.npz"
    np.savez_compressed(p, x=np.arange(10))
    with pytest.raises(DataFileError) as err:
        open_arrays(p)
    text = str(err.value)
    assert str(p) in text and "`x.npy`" in text and "compressed" in text
    assert "np.savez" in text and "folder of .npy" in text


def test_unusable_files_and_folders_are_errors_naming_them(tmp_path):
    with pytest.raises(DataFileError, match="no such file or folder"):
        open_arrays(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    with pytest.raises(DataFileError, match=r"empty: the folder holds no \.npy files"):
        open_arrays(empty)
    bad = tmp_path / "bad"
    bad.mkdir()
    np.save(bad / "x.npy", np.arange(1000, dtype=np.int64))
    whole = (bad / "x.npy").read_bytes()
    (bad / "x.npy").write_bytes(whole[:2000])
    with pytest.raises(DataFileError) as err:
        open_arrays(bad)
    assert str(bad / "x.npy") in str(err.value) and "truncated" in str(err.value)
    (bad / "x.npy").write_bytes(b"not an array at all" * 10)
    with pytest.raises(DataFileError, match=r"x\.npy: not a \.npy array \(bad header"):
        open_arrays(bad)
    (bad / "x.npy").write_bytes(b"")
    with pytest.raises(DataFileError, match=r"x\.npy: the file is empty"):
        open_arrays(bad)
    np.save(bad / "x.npy", np.array([1, None], dtype=object), allow_pickle=True)
    with pytest.raises(DataFileError, match=r"x\.npy: holds Python objects"):
        open_arrays(bad)
    (tmp_path / "d.npz").write_bytes(b"PK junk")
    with pytest.raises(DataFileError, match=r"d\.npz: cannot read"):
        open_arrays(tmp_path / "d.npz")


def test_load_data_reads_a_folder_whole(folder):
    d = load_data(folder)
    for k, w in _arrays().items():
        assert isinstance(d[k], np.ndarray) and np.array_equal(d[k], w)


def test_load_data_file_mapped_and_not(folder, npz, tmp_path):
    plain = load_data_file(folder)
    assert all(isinstance(v, torch.Tensor) for v in plain.values())
    assert plain["x"].dtype == torch.int16 and plain["y"].dtype == torch.float64
    assert mapped_values(plain) == []
    for source in (folder, npz):
        mapped = load_data_file(source, mapped=True)
        assert sorted(mapped) == sorted(_arrays())
        assert sorted(mapped_values(mapped)) == sorted(_arrays())
        assert np.array_equal(mapped["x"].rows([3, 1]), _arrays()["x"][[3, 1]])
    # words are read whole (a deduction parses them whole); the relations are left out
    np.save(folder / "tokens.npy", np.array(["the", "dog"]))
    assert load_data_file(folder, mapped=True)["tokens"] == ["the", "dog"]
    assert "tokens" not in mapped_values(load_data_file(folder, mapped=True))
    p = tmp_path / "packed.npz"
    np.savez_compressed(p, x=np.arange(10))
    with pytest.raises(DataError, match=r"packed\.npz: member `x\.npy` is compressed"):
        load_data_file(p, mapped=True)
    assert load_data_file(p)["x"].tolist() == list(range(10))  # not mapped: read whole
    j = tmp_path / "d.json"
    j.write_text('{"x": [1, 2]}')
    with pytest.raises(DataError, match=r"d\.json: a \.json data file cannot be memory-mapped"):
        load_data_file(j, mapped=True)
    for mapped in (False, True):
        with pytest.raises(DataError, match="no such data file or folder"):
            load_data_file(tmp_path / "missing", mapped=mapped)
    (tmp_path / "none").mkdir()
    with pytest.raises(DataError, match="holds no .npy files"):
        load_data_file(tmp_path / "none")


def test_data_sha256_of_mapped_values_is_that_of_the_data_in_memory(folder, npz):
    want = _arrays()
    x = want["x"]
    obs = {k: v for k, v in want.items() if k != "x"}
    digest = data_sha256(x, obs)
    assert digest == data_sha256(torch.as_tensor(x),
                                 {k: torch.as_tensor(np.ascontiguousarray(v))
                                  for k, v in obs.items()})
    for source in (folder, npz):
        mapped = open_arrays(source)
        assert data_sha256(mapped["x"], {k: mapped[k] for k in obs}) == digest
        # half mapped, half in memory
        assert data_sha256(x, {k: (mapped[k] if i % 2 else obs[k])
                               for i, k in enumerate(obs)}) == digest
    assert data_sha256(None, {"y": open_arrays(folder)["y"]}) != \
        data_sha256(None, {"y": open_arrays(folder)["w"]})


# ---------------------------------------------------------------- the corpus


def _make_corpus():
    sys.path.insert(0, str(DATA))
    try:
        return importlib.import_module("make_corpus")
    finally:
        sys.path.remove(str(DATA))


def test_make_corpus_writes_a_large_corpus_into_a_folder(tmp_path, capsys):
    make_corpus = _make_corpus()
    make_corpus.cli(["--tokens", "20000", "--out", str(tmp_path / "a")])
    assert "20,000 tokens" in capsys.readouterr().err
    x, y = np.load(tmp_path / "a" / "x.npy"), np.load(tmp_path / "a" / "next_token.npy")
    assert x.shape == y.shape == (1250, 16) and x.dtype == y.dtype == np.int16
    assert np.array_equal(x[:, 1:], y[:, :-1]) and np.array_equal(x[1:, 0], y[:-1, -1])
    assert x.min() >= 0 and x.max() < 32 and y.max() < 32
    assert x[0, 0] == 0 and (x == 0).mean() > 0.05  # the stream starts with <eos>: sentences
    assert len(np.unique(x, axis=0)) > 1000  # rows differ: sentences drawn, not repeated
    mapped = load_data_file(tmp_path / "a", mapped=True)
    assert sorted(mapped_values(mapped)) == ["next_token", "x"]
    # deterministic with the seed
    make_corpus.cli(["--tokens", "20000", "--out", str(tmp_path / "b")])
    make_corpus.cli(["--tokens", "20000", "--out", str(tmp_path / "c"), "--seed", "7"])
    for name in ("x.npy", "next_token.npy"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    with pytest.raises(SystemExit):
        make_corpus.cli(["--tokens", "20000"])  # --out is needed


# ---------------------------------------------------------------- memory bound

PROBE = textwrap.dedent("""
    import sys
    import numpy as np
    from pathlib import Path
    from qvr.mapped_arrays import open_arrays

    def mb(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024

    def reset_peak():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # VmHWM := VmRSS (Linux 4.0+)
        except OSError:
            pass  # then the peak may predate the reads: the growth is over-counted

    path = Path(sys.argv[1]) / "big.npy"
    rows, cols = 800_000, 64  # int32: 205 MB
    m = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(rows, cols))
    offset = m.offset
    del m
    with open(path, "r+b") as f:  # written in blocks: never in memory whole
        f.seek(offset)
        for start in range(0, rows, 50_000):
            f.write(np.arange(start * cols, (start + 50_000) * cols, dtype=np.int32).tobytes())
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, rows, 256) for _ in range(1000)]

    reset_peak()
    base = mb("VmRSS")
    a = open_arrays(path.parent)["big"]
    for b in batches:
        out = a.rows(b)
        assert out[0, 0] == b[0] * cols and out.shape == (256, cols)
    ours = mb("VmHWM") - base
    del out

    reset_peak()
    base = mb("VmRSS")
    c = np.load(path, mmap_mode="r")
    for b in batches:
        out = c[np.sort(b)]
    control = mb("VmRSS") - base
    print(f"SIZE {path.stat().st_size / 2**20:.0f} OURS {ours:.1f} CONTROL {control:.1f}")
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_random_batches_keep_the_process_memory_bounded(tmp_path):
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = out.stdout.split("SIZE")[-1].split()
    size, ours, control = float(line[0]), float(line[2]), float(line[4])
    print(f"file {size:.0f} MB: peak RSS growth over 1000 batches of 256 random rows: "
          f"rows() {ours:.1f} MB; np.load(mmap_mode='r') without release {control:.1f} MB")
    assert size > 190
    assert ours < 60, (ours, control)

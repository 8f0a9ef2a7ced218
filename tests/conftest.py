import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("tui", "lsp", ""):  # the repo's packages, installed or not
    sys.path.insert(0, str(ROOT / sub) if sub else str(ROOT))


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden files")


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """One intra-op torch thread per test process: the suite runs two workers on two
    cores (`-n 2`), and two torch threads per worker make every kernel wait on the other
    worker (the decoder fit took 98 s instead of 14).  Session-scoped, so it holds for
    module fixtures too.  Only when torch is already loaded (collection imports it for
    the tests that use it): torch-free tests stay torch-free."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: the processes the tests start (`qvr run`, the dashboard's fit worker, `torchrun`
#: ranks, the language server) run one intra-op thread too: on two cores, two workers
#: each starting a two-thread torch process oversubscribe the machine, and OpenMP's
#: spinning threads make it worse (a 12-step SVI fit of the seed transformer from the
#: dashboard took 74 s in the suite, ~6 s alone)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


#: NUTS's ``compiler="auto"`` compiles the whole transition of runs of 400 iterations or
#: more (seconds of C++ compiling per model); the suite keeps today's ticks unless a test
#: asks for the transition (`tests/inference/test_transition.py`), and so do the commands
#: it runs in subprocesses (they inherit the variable)
os.environ.setdefault("QVR_MCMC_COMPILER", "torchscript")


#: compiled densities and transitions are cached on disk (`qvr.inference.mcmc.graph_cache`,
#: `mcmc/transition_cache.py`).  One fresh directory serves the whole test run: the
#: process that starts pytest makes it before xdist starts its workers, which inherit it
#: through `QVR_TEST_CACHE` (as do the commands the tests start), so a model compiled by
#: one worker is loaded by the other; no test depends on what an earlier run left there.
#: The caches write aside and rename, so two workers storing one key is safe; the tests
#: of caching itself use their own directories.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("QVR_TEST_CACHE"):
    _cache = os.environ["QVR_TEST_CACHE"]  # the run's directory, made by the controller
else:
    _cache = tempfile.mkdtemp(prefix="qvr-test-cache-")
    os.environ["QVR_TEST_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, True)
os.environ["QVR_CACHE_DIR"] = _cache
#: inductor's own cache too (C++ kernels; `/tmp/torchinductor_USER` by default): a machine
#: that ran the suite before keeps compiled kernels there (1.5 GB on the development VM)
#: that a fresh CI box lacks; every run now compiles what it needs, as CI does
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_cache, "inductor"))


#: modules whose tests take tens of seconds each, run first: with two workers, one of them
#: started near the end leaves the other idle for its whole length
HEAVY_FIRST = ("inference/test_posteriordb.py", "runtime/test_e9_recurrence.py",
               "inference/test_start_from.py", "inference/test_model_comparison.py",
               "tui/test_tmux.py", "inference/test_transition.py",
               "inference/test_transition_rows.py")


def pytest_collection_modifyitems(config, items):
    """The `HEAVY_FIRST` modules first (in that order), each module's tests kept in
    order (module fixtures stay shared); the rest as collected."""
    def rank(item):
        path = item.nodeid.split("::")[0].removeprefix("tests/")
        return HEAVY_FIRST.index(path) if path in HEAVY_FIRST else len(HEAVY_FIRST)
    items[:] = sorted(items, key=rank)  # stable: collection order within each rank

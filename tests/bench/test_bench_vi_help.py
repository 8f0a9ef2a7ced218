"""`bench/vi.py --help` works (the bench itself is run by hand: it takes minutes and a
side virtualenv, and its figures are not pass/fail)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_vi_bench_help():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "vi.py"), "--help"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for flag in ("--only", "--steps", "--seed", "--no-side", "--guides", "--side-methods",
                 "--nuts-warmup", "--venv"):
        assert flag in p.stdout
    assert p.stdout.startswith("usage: vi.py")

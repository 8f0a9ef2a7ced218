import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("tui", "lsp", ""):  # the repo's packages, installed or not
    sys.path.insert(0, str(ROOT / sub) if sub else str(ROOT))


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden files")

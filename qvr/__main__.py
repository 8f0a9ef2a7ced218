"""`python -m qvr ...` is the `qvr` command (what `torchrun -m qvr run ...` and
`qvr run --nproc N` start on every rank)."""
import sys

from qvr.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m qvr_tui [FILE] [--run DIR] [--start svi|hmc|nuts|smc]` (the same as `qvr dash`)."""
import sys

from qvr.commands.dash import main

if __name__ == "__main__":
    sys.exit(main())

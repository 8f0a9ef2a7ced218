"""`python -m qvr_tui [FILE] [--run DIR] [--start svi|hmc|nuts|smc]`: the same as `qvr dash`.

It hands over to that command (`python -m qvr dash ...`, in this process's place): the
command line opens the dashboard, so the dashboard imports nothing of it, as its fit
runner starts `qvr run` as a worker process rather than importing it.
"""
import os
import sys


def main(argv=None) -> int:
    command = [sys.executable, "-m", "qvr", "dash", *(sys.argv[1:] if argv is None else argv)]
    if os.name == "posix":
        os.execv(sys.executable, command)  # does not return
    import subprocess
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())

"""Run every benchmark: ``python -m bench`` runs each ``bench/bench_*.py`` as ``python -m bench.<name>`` in turn.

Extra arguments are passed to every script (e.g. ``--no-record``). A script that needs inputs this run cannot give
(a trained model, a data root, a subcommand) stops at its argument parser (exit 2, its usage printed): it is listed
as not run, with the command to run it, rather than as a failure. Exits non-zero if any benchmark failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ARGUMENT_ERROR = 2  # argparse's exit status for missing or unknown arguments


def main() -> int:
    names = sorted(path.stem for path in Path(__file__).parent.glob("bench_*.py"))
    failed, needs_arguments = [], []
    for name in names:
        print(f"== bench.{name}", flush=True)
        code = subprocess.run([sys.executable, "-m", f"bench.{name}", *sys.argv[1:]], check=False).returncode
        if code == ARGUMENT_ERROR:
            needs_arguments.append(name)
        elif code != 0:
            failed.append(name)
    if needs_arguments:
        print("not run, they need arguments (usage above; `python -m bench.NAME --help`): "
              + ", ".join(needs_arguments), file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

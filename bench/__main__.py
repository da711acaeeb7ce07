"""Run every benchmark: ``python -m bench`` runs each ``bench/bench_*.py`` as ``python -m bench.<name>`` in turn.

Extra arguments are passed to every script (e.g. ``--no-record``). Exits non-zero if any benchmark failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    names = sorted(path.stem for path in Path(__file__).parent.glob("bench_*.py"))
    failed = []
    for name in names:
        print(f"== bench.{name}", flush=True)
        if subprocess.run([sys.executable, "-m", f"bench.{name}", *sys.argv[1:]], check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

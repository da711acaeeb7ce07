"""What a `gymforge` command costs before it does anything: the command line's import and start, for a baseline
revision and the checkout side by side. Every command, every `gymforge worker` and every rollout controller a
training run spawns (it imports the command line again as its main module) pays it. `serve-env` on a key the root
does not hold imports the environment server (OpenEnv), then refuses.

Each run is a fresh process running the command line's ``main`` in the tree under test (``--help``, ``artifacts ls``
and ``serve-env nonsense`` on an empty data root), the trees alternating; wall and CPU seconds are the process's own.

    .venv/bin/python -m bench.bench_cli_start [--baseline fa013c2] [--repeats 5] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT, report, tree_at

COMMANDS = (("--help",), ("artifacts", "ls"), ("serve-env", "nonsense"))
_MAIN = "import sys; from flows.cli import main; sys.argv[0] = 'gymforge'; main()"


def run(tree: Path, command: tuple[str, ...], data: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process running ``gymforge COMMAND`` from ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _MAIN, *command], cwd=tree, env=os.environ | {"GYMFORGE_DATA": str(data)},
                   capture_output=True, check=False)  # the cost is the point, not the exit status
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="fa013c2", help="revision whose command line imported envgen.taskgen")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per tree and command")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-cli-start-") as tmp:
        sha, baseline = tree_at(args.baseline, Path(tmp) / "baseline")
        trees = {f"baseline {sha}": baseline, "checkout": ROOT}
        data = Path(tmp) / "data"
        data.mkdir()
        for tree in trees.values():  # bytecode caches written once, as a second command finds them
            run(tree, COMMANDS[0], data)
        measured = {(name, command): [] for name in trees for command in COMMANDS}
        for _ in range(args.repeats):
            for command in COMMANDS:
                for name, tree in trees.items():
                    measured[name, command].append(run(tree, command, data))

    machine = f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    lines = ["", f"## A command's start: baseline {sha} and the checkout (bench_cli_start.py)", "",
             f"Machine: {machine}. Mean of {args.repeats} fresh processes per cell, the trees alternating.", "",
             "| command | tree | wall s | CPU s |", "| --- | --- | --- | --- |"]
    for (name, command), runs in measured.items():
        lines.append(f"| `gymforge {' '.join(command)}` | {name} | {statistics.mean(w for w, _ in runs):.2f} | "
                     f"{statistics.mean(c for _, c in runs):.2f} |")
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

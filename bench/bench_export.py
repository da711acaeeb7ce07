"""`gymforge export` of a published artifact: the command as a user runs it (a fresh process each time), reading the
artifact by its planned key with no server, cluster or flow run, side by side with the path through the store
(`materialize`: a Prefect server, a Dask cluster and a `data-refresh` flow run whose every stage is a cache hit),
which is what an export of a published artifact cost before. Target (issue 27): about a second.

    .venv/bin/python -m bench.bench_export [--repeats 3] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import report

GYMFORGE = str(Path(sys.executable).parent / "gymforge")
STAGE = "math_seeds"  # no upstream: the data root is made in seconds


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def through_the_store(root: Path, out: Path) -> list[str]:
    """The export's earlier path: materialize the stage (cache hits), then read it."""
    code = ("import sys; from flows.dag import materialize; "
            f"materialize([{STAGE!r}], profile='tiny', data_dir={str(root)!r})[{STAGE!r}].read('problems')"
            f".write_ndjson({str(out)!r})")
    return [sys.executable, "-c", code]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-export-") as scratch:
        root, out = Path(scratch) / "data", Path(scratch) / "out.jsonl"
        env = {**{k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")},
               "GYMFORGE_DATA": str(root)}
        export = [GYMFORGE, "export", "--artifact", STAGE, "--format", "jsonl", "--out", str(out)]
        subprocess.run(export, env=env, check=True, capture_output=True)  # first: publishes it through the store
        rows = sum(1 for _ in out.open())
        arms = {"export (planned key, no flow run)": export, "through the store (data-refresh, cache hits)":
                through_the_store(root, out)}
        seconds: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.repeats):  # interleaved, so load changes hit both arms alike
            for name, command in arms.items():
                seconds[name].append(timed(command, env))
    load = os.getloadavg()[0]
    fast, slow = (statistics.median(seconds[name]) for name in arms)
    setup = (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load "
             f"average {load:.1f} at the end. `{STAGE}` of the tiny profile ({rows} rows) published once, then "
             f"exported {args.repeats} times by each arm in turn, each a fresh process as a user runs it (median).")
    verdict = (f"The export reads the artifact {slow / fast:.1f}x faster than the path through the store; its time "
               "is imports: the CLI's, the stage modules the profile names, and Prefect (for the console set-up).")
    lines = [f"\n## Export of a published artifact (bench_export.py, {time.strftime('%Y-%m-%d')})", "", setup, "",
             "| arm | seconds (median) | runs |", "| --- | --- | --- |",
             *(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |"
               for name, values in seconds.items()), "", verdict]
    report(lines, record=not args.no_record)


if __name__ == "__main__":
    main()

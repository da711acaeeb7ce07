"""What a Runtime's idle Dask cluster costs, with Dask's own settings vs the Runtime's (``flows.runtime.QUIET_CLUSTER``),
side by side: a started 2-worker cluster waits for work, and the CPU-seconds a minute of its process (the scheduler
and the nannies) and its worker processes are counted. A pipeline's cluster idles between stages, a worker's between
runs, and a test session's for the whole session.

Each arm runs in a fresh Python process, the arms alternating; both attach to one Prefect server started first (its
own idle cost is the same for both and not counted).

    .venv/bin/python -m bench.bench_cluster_idle [--repeats 1] [--seconds 60] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from bench import add_arm_options, report, run_arms

ARMS = {"dask": "Dask's settings", "runtime": "the Runtime's (QUIET_CLUSTER)"}
SETTLE_S = 5.0  # after the start, before counting: the start's own CPU is bench_cluster_start.py's subject


def _cpu_s() -> float:
    import psutil

    processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
    return sum(sum(process.cpu_times()[:2]) for process in processes)


def arm(name: str, root: Path, api_url: str, seconds: float) -> dict[str, float]:
    """In a fresh process: start the arm's cluster, let it settle, and count its CPU over ``seconds`` of idling."""
    from flows import runtime as runtime_module

    if name == "dask":
        runtime_module.QUIET_CLUSTER = {}
    with runtime_module.Runtime(root, prefect_api_url=api_url, n_workers=2):
        time.sleep(SETTLE_S)
        before = _cpu_s()
        time.sleep(seconds)
        return {"cpu_per_min": (_cpu_s() - before) * 60 / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="idle seconds counted per run")
    add_arm_options(parser, ARMS, repeats=1)
    args = parser.parse_args()

    if args.arm:
        print(json.dumps(arm(args.arm, args.root, args.api_url, args.seconds)))
        return

    runs = run_arms("bench.bench_cluster_idle", ARMS, args.repeats, "--seconds", str(args.seconds))
    median = {name: statistics.median(run["cpu_per_min"] for run in rs) for name, rs in runs.items()}
    machine = f"{platform.machine()}, {os.cpu_count()} cores (shared, load {os.getloadavg()[0]:.1f})"
    setup = (f"Machine: {machine}. Median of {args.repeats} fresh processes per arm, alternating. A 2-worker "
             f"cluster, started and settled {SETTLE_S:.0f} s, idles {args.seconds:.0f} s.")
    lines = ["", "## A Runtime's idle Dask cluster: Dask's settings vs the Runtime's (bench_cluster_idle.py)", "",
             setup, "", "| settings | CPU-s a minute (scheduler, nannies, workers) |", "| --- | --- |"]
    lines += [f"| {ARMS[name]} | {value:.2f} |" for name, value in median.items()]
    lines.append(f"\nRuntime's / Dask's: x{median['runtime'] / median['dask']:.2f}.")
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

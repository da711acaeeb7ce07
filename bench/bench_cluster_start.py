"""A Runtime's Dask workers spawned (Dask's default) vs forked from a server that imported what stage tasks import
(``flows.runtime.WORKER_PRELOAD``), side by side: a 2-worker cluster starts and refreshes the pipeline's source
stages (``world``, ``domain_graphs``, ``math_seeds``; tiny profile) on two partitions at once; wall seconds from the
cluster's start to the refreshes' end, and the CPU-seconds of the processes the cluster started (the fork server's
own included).

Each arm runs in a fresh Python process (a process has one fork server), the arms alternating; both attach to one
Prefect server started first.

    .venv/bin/python -m bench.bench_cluster_start [--repeats 3] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import add_arm_options, report, run_arms

STAGES = ["world", "domain_graphs", "math_seeds"]
ARMS = {"spawned": "spawned workers (Dask's default)", "forked": "forked from the preloaded server (a Runtime's)"}


def arm(name: str, root: Path, api_url: str) -> dict[str, float]:
    """In a fresh process: start the arm's cluster, run the refresh, and measure before the cluster stops."""
    import psutil
    from distributed import LocalCluster

    from flows.dag import refresh
    from flows.runtime import Runtime, cluster_kwargs

    os.environ["PREFECT_API_URL"] = api_url  # spawned workers inherit it; the Runtime hands it to forked ones
    start = time.perf_counter()
    if name == "spawned":
        cluster = LocalCluster(**cluster_kwargs(2), host="127.0.0.1", local_directory=str(root / "dask-spawned"))
        runtime = Runtime(root, prefect_api_url=api_url, dask_address=cluster.scheduler_address)
    else:
        cluster, runtime = None, Runtime(root, prefect_api_url=api_url, n_workers=2)
    with runtime, ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda partition: refresh(runtime, partition=partition, stages=STAGES), ("a", "b")))
        wall = time.perf_counter() - start
        cpu = sum(sum(child.cpu_times()[:2]) for child in psutil.Process().children(recursive=True))
    if cluster is not None:
        cluster.close()
    return {"wall_s": wall, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arm_options(parser, ARMS, repeats=3)
    args = parser.parse_args()

    if args.arm:
        print(json.dumps(arm(args.arm, args.root, args.api_url)))
        return

    runs = run_arms("bench.bench_cluster_start", ARMS, args.repeats)
    median = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")} for name, rs in runs.items()}
    machine = f"{platform.machine()}, {os.cpu_count()} cores (shared, load {os.getloadavg()[0]:.1f})"
    stages = ", ".join(f"`{stage}`" for stage in STAGES)
    setup = (f"Machine: {machine}. Median of {args.repeats} fresh processes per arm, alternating. A 2-worker cluster "
             f"starts and refreshes {stages} (tiny) on two partitions at once.")
    lines = ["", "## A Runtime's Dask workers: spawned vs forked from a preloaded server (bench_cluster_start.py)", "",
             setup, "", "| workers | start + refresh, wall s | CPU-s of the cluster's processes |", "| --- | --- | --- |"]
    lines += [f"| {ARMS[name]} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} |" for name, m in median.items()]
    lines.append(f"\nForked / spawned: wall x{median['forked']['wall_s'] / median['spawned']['wall_s']:.2f}, "
                 f"CPU x{median['forked']['cpu_s'] / median['spawned']['cpu_s']:.2f}.")
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

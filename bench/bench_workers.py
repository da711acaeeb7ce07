"""Lean workers: what a process pays to be ready to run one stage, when the registry imports every stage module
(``discover``, what every Dask worker did) against only the stage's own module (``stage_named``), and the
registry of a baseline revision (exported with ``git archive``), whose stage lookup imported every module.

Each arm runs in a fresh Python process, as a new Dask worker does: wall seconds to import and look the stage up,
and the process's peak resident memory afterwards; and in a real one-worker ``LocalCluster``, the worker's resident
memory after it ran the lookup for ``world``.

    .venv/bin/python -m bench.bench_workers [--baseline REV] [--repeats 3] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import report, tree_at

STAGES = ("world", "keychain", "tiny_policy")

_PROBE = """
import json, resource, sys, time
start = time.perf_counter()
from flows.registry import discover, stage_named
stage_named(sys.argv[2]) if sys.argv[1] == "lean" else discover()
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def probe(mode: str, stage: str, tree: Path | None = None) -> dict:
    """A fresh process of the checkout, or of ``tree`` (an exported revision) first on the import path."""
    env = os.environ | ({"PYTHONPATH": str(tree)} if tree else {})
    out = subprocess.run([sys.executable, "-c", _PROBE, mode, stage], capture_output=True, text=True, check=True,
                         env=env, cwd=tree)
    return json.loads(out.stdout)


def dask_worker_rss(mode: str) -> float:
    """Resident MB of a fresh Dask worker after it looked ``world`` up (as ``run_stage`` does)."""
    from distributed import Client, LocalCluster

    def lookup(mode: str) -> float:
        import psutil

        from flows.registry import discover, stage_named

        stage_named("world") if mode == "lean" else discover()
        return psutil.Process().memory_info().rss / 2**20

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        return client.submit(lookup, mode, pure=False).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="5546d74", help="revision whose registry imported every stage "
                                                              "module on a lookup")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per arm (the median is kept)")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        _, baseline = tree_at(args.baseline, Path(tmp))
        rows.append((f"`world` through the registry of {args.baseline}",
                     [probe("all", "world", baseline) for _ in range(args.repeats)]))
    every = [probe("all", "world") for _ in range(args.repeats)]
    rows.append(("every stage module (discover)", every))
    for stage in STAGES:
        rows.append((f"`{stage}`'s module only", [probe("lean", stage) for _ in range(args.repeats)]))
    workers = {mode: dask_worker_rss(mode) for mode in ("all", "lean")}

    machine = f"{platform.machine()}, {os.cpu_count()} cores (shared, load {os.getloadavg()[0]:.1f})"
    lines = [
        "",
        "## Worker start-up: importing every stage module vs the stage's own (bench_workers.py)",
        "",
        f"Machine: {machine}. Median of {args.repeats} fresh processes per row.",
        "",
        "| a process ready to run | seconds | peak RSS MB | loads torch | loads transformers |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, runs in rows:
        lines.append(f"| {label} | {statistics.median(r['seconds'] for r in runs):.2f} | "
                     f"{statistics.median(r['rss_mb'] for r in runs):.0f} | {runs[0]['torch']} | "
                     f"{runs[0]['transformers']} |")
    lines.append(f"\nA one-worker LocalCluster's worker after looking `world` up: {workers['all']:.0f} MB resident "
                 f"when it imports every stage module, {workers['lean']:.0f} MB with `world`'s only.")
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

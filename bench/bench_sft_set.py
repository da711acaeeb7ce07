"""sft_set's peak memory and what it keeps, for two code trees side by side on one data root's inputs.

Each tree runs the stage in its own process (``PYTHONPATH`` set to the tree) on the same published inputs: the
latest published artifact of every input stage in the data root's catalog (``--data-dir``), the root's profile
params (``--profile``) with ``--set name=value`` on top. A run prints its peak resident memory (the process's
``ru_maxrss``: the stage, the embedding model and the scorer together), wall time, the candidates and their tokens,
the research trajectories kept, and the selection's coverage against a random pick of the same size.

    .venv/bin/python -m bench.bench_sft_set --data-dir DIR --profile small --trees /path/to/old /path/to/new
        [--max-rss-gb 12] [--set alpha=1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date

from bench import report

RUN = r"""
import json, resource, sys, time
import polars as pl
from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.stage import get_stage
from flows.profiles import load_profile
import tasks.midtrain.sft_set  # noqa: F401 (registers the stage)

root, profile, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
stage = get_stage("sft_set")
catalog, store = Catalog(root), open_store(root)
inputs = {name: store.get(name, latest.key) for name in stage.inputs if (latest := catalog.latest(name)) is not None}
params = stage.parse_params({**load_profile(profile).get("sft_set", {}), **overrides})
start = time.perf_counter()
out = stage.run(inputs, params, "default")
summary = dict(zip(out["summary"]["name"], out["summary"]["value"]))
scores = out["scores"]
research = scores.filter(pl.col("source") == "research")["id"]
print(json.dumps({
    "seconds": time.perf_counter() - start,
    "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    "candidates": scores.height, "candidate_tokens": int(scores["tokens"].sum()),
    "research_kept": scores.filter(pl.col("parent_id").is_in(research.implode()) & pl.col("score").is_not_null()).height,
    "research_in": research.len(),
    "coverage": {k: round(v, 3) for k, v in summary.items() if k.startswith("coverage")},
}))
"""


def run_tree(tree: str, root: str, profile: str, overrides: dict, max_rss_gb: float) -> dict:
    """Run the stage under ``tree``; a run whose resident memory passes ``max_rss_gb`` is stopped (the machine is
    shared: an unbounded run would take the others' memory), and reported with the memory it had reached."""
    import psutil

    env = {**os.environ, "PYTHONPATH": tree}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-c", RUN, root, profile, json.dumps(overrides)], env=env,
                                 cwd=tree, stdout=out, stderr=err, text=True)
        watched, peak = psutil.Process(child.pid), 0.0
        while child.poll() is None:
            try:
                peak = max(peak, watched.memory_info().rss / 2**30)
            except psutil.NoSuchProcess:
                break
            if peak > max_rss_gb:
                child.kill()
                child.wait()
                return {"error": f"stopped at {peak:.1f} GB resident (over --max-rss-gb {max_rss_gb})"}
            time.sleep(0.5)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            return {"error": (err.read().strip().splitlines() or ["killed"])[-1]}
        return json.loads(out.read().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--trees", nargs="+", required=True, help="code trees to compare (the first is 'before')")
    parser.add_argument("--set", nargs="*", default=[], help="sft_set params name=value (JSON values)")
    parser.add_argument("--max-rss-gb", type=float, default=12.0, help="stop a run past this resident memory")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    lines = [f"\n### sft_set peak memory and selection, {date.today()} ({args.profile} inputs of {args.data_dir})\n",
             (f"Machine: {platform.machine()}, {os.cpu_count()} cores, shared with other work; one process per tree, "
              f"params {overrides or 'of the profile'}.\n"),
             "| tree | peak RSS GB | s | candidates | tokens | research kept / in | coverage (selection vs random) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for tree in args.trees:
        started = time.perf_counter()
        r = run_tree(tree, args.data_dir, args.profile, overrides, args.max_rss_gb)
        if "error" in r:
            lines.append(f"| {tree} | failed after {time.perf_counter() - started:.0f} s: {r['error']} | | | | | |")
            continue
        c = r["coverage"]
        cover = "; ".join(f"{k.removeprefix('coverage_')} {v} vs {c.get(k + '_random')}" for k, v in c.items()
                          if not k.endswith("_random"))
        lines.append(f"| {tree} | {r['peak_rss_gb']:.2f} | {r['seconds']:.0f} | {r['candidates']} | "
                     f"{r['candidate_tokens']:,} | {r['research_kept']} / {r['research_in']} | {cover} |")
    report(lines, record=not args.no_record)


if __name__ == "__main__":
    main()

"""World seeds per second at 10k and 100k seeds, phase by phase, with peak memory; and the indexed uniqueness check
against a full scan of the graph, side by side on the same questions.

Each size runs in a fresh process so its peak RSS is its own. The graph has one entity per seed by default.

    .venv/bin/python -m bench.bench_world [--seeds 10000 100000] [--entities-per-seed 1.0]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).with_name("RESULTS.md")


def measure(n_seeds: int, entities_per_seed: float) -> dict[str, Any]:
    from tasks.world import WorldParams, build_world, entity_frame, generate_seeds, world_stage

    params = WorldParams(n_entities=max(60, int(n_seeds * entities_per_seed)), n_questions=n_seeds)
    t0 = time.perf_counter()
    world, docs = build_world(params.seed, params.n_entities)
    t1 = time.perf_counter()
    seeds, rejected = generate_seeds(world, docs, params, "p0")
    t2 = time.perf_counter()
    entity_frame(world)
    import polars as pl

    frame = pl.DataFrame(seeds, schema=world_stage.outputs["seeds"].columns, orient="row")
    t3 = time.perf_counter()

    # Side by side on up to 2,000 kept questions: the indexed check (smallest bucket, then filter) against a
    # boolean mask over every entity of the anchor's type for each constraint.
    sides = [s for row in seeds[:2000] for s in json.loads(row["program"])["sides"]]
    keyed = []
    for s in sides:
        anchor = int(s["anchor"][1:])
        t = world.types[anchor]
        keyed.append((t, [(a, o, int(world.buckets[(t, a, o)][anchor])) for a, o, _ in s["constraints"]], s["path"]))
    start = time.perf_counter()
    indexed = [len(np.unique(world.follow(world.satisfying(t, cs), path))) for t, cs, path in keyed]
    t_indexed = time.perf_counter() - start
    start = time.perf_counter()
    scanned = []
    for t, cs, path in keyed:
        mask = np.ones(world.n, dtype=bool)
        for a, o, v in cs:
            mask &= world.buckets[(t, a, o)] == v
        scanned.append(len(np.unique(world.follow(np.flatnonzero(mask), path))))
    t_scan = time.perf_counter() - start
    if indexed != scanned:
        raise RuntimeError("the indexed uniqueness check and the full scan disagree")
    return {
        "seeds": n_seeds, "entities": params.n_entities, "kept": frame.height, "rejected": len(rejected),
        "graph_s": t1 - t0, "questions_s": t2 - t1, "frames_s": t3 - t2, "total_s": t3 - t0,
        "docs_mb": sum(len(r["docs"]) for r in seeds) / 1e6,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "check_indexed_us": 1e6 * t_indexed / max(len(keyed), 1), "check_scan_us": 1e6 * t_scan / max(len(keyed), 1),
    }


def _child(n: int, eps: float, queue: mp.Queue) -> None:
    queue.put(measure(n, eps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--entities-per-seed", type=float, default=1.0)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    rows = []
    for n in args.seeds:
        queue = ctx.Queue()
        proc = ctx.Process(target=_child, args=(n, args.entities_per_seed, queue))
        proc.start()
        result = queue.get()
        proc.join()
        rows.append(result)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}))

    lines = [
        "",
        "## World seeds (bench/bench_world.py)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()} (shared with other "
        f"jobs; one run per size, each in a fresh process). Graph: {args.entities_per_seed:g} entity per seed. "
        "Seeds/s counts kept seeds over the whole stage (graph, documents, questions, frames). Uniqueness check: "
        "per reasoning path of kept questions, indexed (smallest bucket, then filter) vs a mask over every entity.",
        "",
        "| seeds asked | entities | kept | rejected | graph+docs s | questions s | frames s | seeds/s (all) "
        "| seeds/s (questions) | docs MB | peak RSS MB | check indexed µs | check full scan µs | scan / indexed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seeds']:,} | {r['entities']:,} | {r['kept']:,} | {r['rejected']:,} | {r['graph_s']:.1f} | "
            f"{r['questions_s']:.1f} | {r['frames_s']:.1f} | {r['kept'] / r['total_s']:,.0f} | "
            f"{r['kept'] / r['questions_s']:,.0f} | {r['docs_mb']:.0f} | {r['peak_rss_mb']:,.0f} | "
            f"{r['check_indexed_us']:.1f} | {r['check_scan_us']:.1f} | "
            f"{r['check_scan_us'] / r['check_indexed_us']:.1f}x |")
    with RESULTS.open("a") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

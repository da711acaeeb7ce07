"""World seeds per second at 10k and 100k seeds, phase by phase, with peak memory; the indexed uniqueness check
against a full scan of the graph, side by side on the same questions; and the streaming HotpotQA loader against
``json.load`` of the whole file, on a synthetic file in HotpotQA's format.

Each measurement runs in a fresh process so its peak RSS is its own. The graph has one entity per seed by default.

    .venv/bin/python -m bench.bench_world [--seeds 10000 100000] [--entities-per-seed 1.0] [--loader-records 30000]
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

from bench import report


def measure(n_seeds: int, entities_per_seed: float) -> dict[str, Any]:
    from tasks.longctx.world import WorldParams, build_world, entity_frame, generate_seeds
    from tasks.longctx.world import world as world_stage

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


def hotpot_file(path: Path, records: int) -> None:
    """HotpotQA's layout and sizes: 10 paragraphs of about 4 sentences each, 2 supporting titles."""
    import random

    rng = random.Random(0)
    words = ("river", "ledger", "amber", "signal", "harbor", "quartz", "meadow", "cipher", "lantern", "orbit")
    with path.open("w") as fh:
        fh.write("[")
        for i in range(records):
            context = [[f"Title {i}-{c}", [" ".join(rng.choices(words, k=22)) + "." for _ in range(4)]]
                       for c in range(10)]
            record = {"_id": f"id{i}", "question": f"Which {rng.choice(words)} is {i}?", "answer": f"answer {i}",
                      "supporting_facts": [[f"Title {i}-0", 0], [f"Title {i}-1", 2]], "context": context,
                      "type": "bridge", "level": "medium"}
            fh.write(("," if i else "") + json.dumps(record, indent=1))
        fh.write("]")


def measure_loader(path: str, streaming: bool) -> dict[str, Any]:
    start = time.perf_counter()
    if streaming:
        from tasks.longctx.qa_seeds import load_seed_file

        rows = load_seed_file("hotpotqa", path)[0].height
    else:
        with open(path) as fh:
            rows = len(json.load(fh))
    return {"rows": rows, "s": time.perf_counter() - start,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _child(fn: Any, args: tuple, queue: mp.Queue) -> None:
    queue.put(fn(*args))


def in_fresh_process(fn: Any, *args: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(fn, args, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[10_000, 100_000], help="none: loader only")
    parser.add_argument("--entities-per-seed", type=float, default=1.0)
    parser.add_argument("--loader-records", type=int, default=30_000)
    args = parser.parse_args()
    rows = []
    for n in args.seeds:
        rows.append(in_fresh_process(measure, n, args.entities_per_seed))
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}))
    data = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-hotpot-{args.loader_records}.json"
    hotpot_file(data, args.loader_records)
    size_mb = data.stat().st_size / 1e6
    stream, whole = (in_fresh_process(measure_loader, str(data), s) for s in (True, False))
    data.unlink()
    print(json.dumps({"file_mb": size_mb, "streaming": stream, "json_load": whole}))

    lines = []
    if rows:
        lines += [
            "",
            "## World seeds (bench/bench_world.py)",
            "",
            (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()} (shared with "
             f"other jobs; one run per size, each in a fresh process). Graph: {args.entities_per_seed:g} entity per "
             "seed. Seeds/s counts kept seeds over the whole stage (graph, documents, questions, frames). Uniqueness "
             "check: per reasoning path of kept questions, indexed (smallest bucket, then filter) vs a mask over "
             "every entity."),
            "",
            ("| seeds asked | entities | kept | rejected | graph+docs s | questions s | frames s | seeds/s (all) "
             "| seeds/s (questions) | docs MB | peak RSS MB | check indexed µs | check full scan µs | scan / indexed |"),
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
    for r in rows:
        lines.append(
            f"| {r['seeds']:,} | {r['entities']:,} | {r['kept']:,} | {r['rejected']:,} | {r['graph_s']:.1f} | "
            f"{r['questions_s']:.1f} | {r['frames_s']:.1f} | {r['kept'] / r['total_s']:,.0f} | "
            f"{r['kept'] / r['questions_s']:,.0f} | {r['docs_mb']:.0f} | {r['peak_rss_mb']:,.0f} | "
            f"{r['check_indexed_us']:.1f} | {r['check_scan_us']:.1f} | "
            f"{r['check_scan_us'] / r['check_indexed_us']:.1f}x |")
    lines += [
        "",
        "## QA seed loader, streaming vs whole file (bench/bench_world.py)",
        "",
        (f"Loader ({platform.machine()}, {os.cpu_count()} CPUs, shared): a {size_mb:.0f} MB file in HotpotQA's "
         f"format ({args.loader_records:,} records, 10 paragraphs each). Streaming = `load_seed_file` (parse, "
         "convert to qa_seed rows, hash splits); whole file = `json.load` only."),
        "",
        "| reader | records | s | records/s | peak RSS MB |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {name} | {r['rows']:,} | {r['s']:.1f} | {r['rows'] / r['s']:,.0f} | {r['peak_rss_mb']:,.0f} |"
          for name, r in (("streaming load_seed_file", stream), ("json.load (whole file)", whole))),
    ]
    report(lines)


if __name__ == "__main__":
    main()

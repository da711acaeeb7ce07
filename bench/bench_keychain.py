"""KeyChain throughput and overhead at 16K tokens on a HotpotQA-sized pool (issue 3, "Show").

A synthetic `qa_filtered` output of HotpotQA size (about 90k seeds, 480k distinct documents, a word distribution
with a long tail so the tokenizer's word cache misses as on real text) and gymforge's own byte-level BPE trained on
a slice of it. Measured:

- the ratio (time per example) / (time to tokenize that example's final prompt once), in one process; the target
  is at most 2.0 (the authors' scripts: about 10x, and about 30% over the 16K budget);
- % of prompts outside [target - 2%, target] and full tokenizations per example;
- examples/s on 1 and 2 Dask workers (a distributed LocalCluster, one thread per worker), setup (pool build) kept
  apart from building, and the peak resident memory of each worker.

    .venv/bin/python -m bench.bench_keychain [--examples 120] [--target 16384] [--seeds 90000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from bench import report

CACHE = Path(os.environ.get("GYMFORGE_BENCH_CACHE", "/tmp/gymforge-bench-keychain"))
SYLLABLES = ("ka", "lo", "mi", "ren", "tas", "vor", "eli", "dun", "sha", "pri", "gel", "ost", "wen", "ari", "bur", "cal",
             "dre", "fen", "hol", "iss", "jor", "kel", "mun", "nor", "pal", "qua")


def vocabulary(n: int, rng: np.random.Generator) -> list[str]:
    """About ``n`` distinct pseudo-words of 1-4 syllables, shortest first (they get the frequent zipf ranks)."""
    picks = rng.integers(0, len(SYLLABLES), size=(2 * n, 4))
    lengths = rng.integers(1, 5, size=2 * n)
    words = dict.fromkeys("".join(SYLLABLES[i] for i in row[:k]) for row, k in zip(picks, lengths, strict=True))
    return sorted(words, key=len)[:n]


def synthetic_pool(n_seeds: int, docs_per_seed: float, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, rejected) frames in the qa_filtered layout: 20% kept (LoongRL kept 72K of 277K)."""
    rng = np.random.default_rng(seed)
    words = vocabulary(200_000, rng)
    n_docs = int(n_seeds * docs_per_seed)
    lengths = rng.integers(50, 110, size=n_docs)  # words per document (HotpotQA paragraphs: a few sentences)
    ranks = np.minimum(rng.zipf(1.1, size=int(lengths.sum())), len(words)) - 1
    texts, pos = [], 0
    for length in lengths:
        chunk = [words[r] for r in ranks[pos : pos + length]]
        pos += length
        for j in range(11, len(chunk), 12):
            chunk[j] += "."
        chunk[0] = chunk[0].capitalize()
        texts.append(" ".join(chunk) + ".")
    owner = np.sort(rng.integers(0, n_seeds, size=n_docs))
    owner[:n_seeds] = np.arange(n_seeds)  # every seed has at least one document
    owner.sort()
    docs_by_seed: list[list[dict[str, Any]]] = [[] for _ in range(n_seeds)]
    for d, s in enumerate(owner):
        docs_by_seed[s].append({"title": f"Doc {d}", "text": texts[d], "is_supporting": False})
    rows = []
    for s, docs in enumerate(docs_by_seed):
        answer = texts[int(owner.searchsorted(s))].split()[3].strip(".")
        docs[0]["is_supporting"] = True
        rows.append({"id": f"s{s}", "question": f"What is the fourth word of document {s} about {words[s]}?",
                     "answer": answer, "aliases": [], "docs": json.dumps(docs), "split": "train",
                     "pass_count": s % 9, "pass_k": 8})
    frame = pl.DataFrame(rows, schema_overrides={"aliases": pl.List(pl.String)})
    kept = frame.filter(pl.col("pass_count").is_between(1, 7) & (pl.int_range(pl.len()) % 4 == 0))
    rejected = frame.join(kept.select("id"), on="id", how="anti").with_columns(reason=pl.lit("too_easy"))
    return kept, rejected


def prepare_inputs(n_seeds: int) -> tuple[Path, Path, Path]:
    from inference.tokenizer import save, train_tokenizer

    CACHE.mkdir(parents=True, exist_ok=True)
    kept_path, rej_path, tok_dir = CACHE / f"kept-{n_seeds}.parquet", CACHE / f"rejected-{n_seeds}.parquet", CACHE / "tok"
    if not kept_path.exists():
        t = time.perf_counter()
        kept, rejected = synthetic_pool(n_seeds, 480_000 / 90_000)
        kept.write_parquet(kept_path)
        rejected.write_parquet(rej_path)
        print(f"synthetic pool: {kept.height + rejected.height} seeds in {time.perf_counter() - t:.0f}s")
    if not (tok_dir / "tokenizer.json").exists():
        sample = pl.read_parquet(rej_path, n_rows=4000)["docs"]
        save(train_tokenizer((d["text"] for doc in sample for d in json.loads(doc)), 8192), tok_dir)
    return kept_path, rej_path, tok_dir


def _builder(kept_path: str, rej_path: str, tok_dir: str, target: int, total: int,
             counting: str = "lazy") -> tuple[Any, pl.DataFrame]:
    from data_contracts.stage import FrameArtifact
    from tasks.longctx.keychain import KeyChainBuilder, KeyChainParams, prepare
    from tasks.tokenizer import resolve_tokenizer

    params = KeyChainParams(n=total, n_regular=0, target_tokens=target, tokenizer=tok_dir, pool_counting=counting)
    qa = FrameArtifact({"seeds": pl.read_parquet(kept_path), "rejected": pl.read_parquet(rej_path)})
    items, pool, questions = prepare({"qa_filtered": qa}, params)
    return KeyChainBuilder(params, resolve_tokenizer(tok_dir, {}), pool, questions, "bench"), items


def shard(args: tuple[str, str, str, int, int, int, int]) -> dict[str, Any]:
    """Build examples ``start .. start+count`` in this process (a Dask task); timings and peak memory."""
    from tasks.longctx.keychain import build_frames

    kept_path, rej_path, tok_dir, target, start, count, total = args
    t0 = time.perf_counter()
    builder, items = _builder(kept_path, rej_path, tok_dir, target, total)
    t1, cpu = time.perf_counter(), time.process_time()
    frames = build_frames(builder, items.slice(start, count), start=start)
    return {"setup_s": t1 - t0, "build_s": time.perf_counter() - t1, "cpu_s": time.process_time() - cpu,
            "rows": frames["keychain"].height,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def interleaved(paths: tuple[str, str, str], target: int, examples: int, counting: str) -> dict[str, Any]:
    """Build one example, then tokenize its final prompt once, right away: the two times are measured under the
    same machine load (this machine is shared), and their ratio is the overhead of the whole KeyChain procedure."""
    from tasks.longctx.token_budget import length_window

    t0 = time.perf_counter()
    builder, items = _builder(*paths, target, examples, counting)
    setup = time.perf_counter() - t0
    counted = {"s": 0.0, "docs": 0}
    count = builder.pool.count

    def timed_count(idx: Any, counter: Any) -> list[int]:  # the lazy document counting's share (bench-only)
        before, t = int((builder.pool.counts >= 0).sum()), time.perf_counter()
        out = count(idx, counter)
        counted["s"] += time.perf_counter() - t
        counted["docs"] += int((builder.pool.counts >= 0).sum()) - before
        return out

    builder.pool.count = timed_count
    build, tokenize, tokens = [], [], []
    for index, seed in enumerate(items.iter_rows(named=True)):
        t = time.perf_counter()
        row = builder.build(index, seed)
        build.append(time.perf_counter() - t)
        text = builder.prefix + json.loads(row["prompt"])[0]["content"] + builder.suffix
        t = time.perf_counter()
        builder.counter.tok(text, add_special_tokens=False)
        tokenize.append(time.perf_counter() - t)
        tokens.append(row["tokens"])
    lo, hi = length_window(target)
    n = len(build)
    # At the report's scale (7,500 examples from this pool) nearly every pool document gets counted once over the
    # run: charge each example 1/7500 of counting the whole pool, at the measured counting throughput.
    pool_count_s = counted["s"] / max(1, counted["docs"]) * len(builder.pool)
    amortized = (sum(build) - counted["s"]) / n + pool_count_s / 7500
    return {
        "pool_docs": len(builder.pool), "setup_s": setup, "examples": n,
        "per_example_ms": 1e3 * sum(build) / n, "tokenize_ms": 1e3 * sum(tokenize) / n,
        "ratio": sum(build) / sum(tokenize),
        "ratio_median": statistics.median(b / t for b, t in zip(build, tokenize, strict=True)),
        "count_ms": 1e3 * counted["s"] / n, "ratio_amortized": amortized / (sum(tokenize) / n),
        "outside_pct": 100 * sum(not lo <= t <= hi for t in tokens) / n, "tokens_mean": statistics.mean(tokens),
        "exact_per_example": builder.counter.exact_counts / n,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def needles_run(tok_dir: str, rej_path: str, target: int, examples: int) -> dict[str, float]:
    """RULER multi-key needles on the pool's documents as haystack: ms/example and the same overhead ratio."""
    from tasks.longctx.needles import NeedleBuilder, NeedleParams
    from tasks.longctx.token_budget import DocPool
    from tasks.tokenizer import resolve_tokenizer

    texts = [d["text"] for doc in pl.read_parquet(rej_path, n_rows=20_000)["docs"] for d in json.loads(doc)]
    params = NeedleParams(n_multikey=examples, n_multivalue=0, target_tokens=target, tokenizer=tok_dir)
    builder = NeedleBuilder(params, resolve_tokenizer(tok_dir, {}), DocPool([""] * len(texts), texts, "bench"), "b")
    build, tokenize = [], []
    for index in range(examples):
        t = time.perf_counter()
        row = builder.build(index, "multikey")
        build.append(time.perf_counter() - t)
        text = builder.prefix + json.loads(row["prompt"])[0]["content"] + builder.suffix
        t = time.perf_counter()
        builder.counter.tok(text, add_special_tokens=False)
        tokenize.append(time.perf_counter() - t)
    return {"ms": 1e3 * statistics.mean(build), "ratio": sum(build) / sum(tokenize)}


def dask_run(paths: tuple[str, str, str], target: int, examples: int, workers: int) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    per = -(-examples // workers)
    jobs = [(*paths, target, w * per, min(per, examples - w * per), examples) for w in range(workers)]
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      memory_limit="8GiB") as cluster, Client(cluster) as client:
        t = time.perf_counter()
        results = client.gather(client.map(shard, jobs, pure=False))
        wall = time.perf_counter() - t
    n = sum(r["rows"] for r in results)
    return {"workers": workers, "examples": n, "wall_s": wall, "examples_per_s_wall": n / wall,
            "examples_per_s_build": n / max(r["build_s"] for r in results),
            "setup_s": max(r["setup_s"] for r in results),
            "examples_per_cpu_s": n / sum(r["cpu_s"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=120)
    parser.add_argument("--target", type=int, default=16384)
    parser.add_argument("--seeds", type=int, default=90_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()

    kept_path, rej_path, tok_dir = prepare_inputs(args.seeds)
    paths = (str(kept_path), str(rej_path), str(tok_dir))
    load_before = os.getloadavg()[0]
    upfront = interleaved(paths, args.target, args.examples, "upfront")
    print(f"in-process, pool counted upfront: setup {upfront['setup_s']:.1f}s, {upfront['per_example_ms']:.1f} "
          f"ms/example, one tokenization {upfront['tokenize_ms']:.1f} ms, ratio {upfront['ratio']:.2f}")
    r = interleaved(paths, args.target, args.examples, "lazy")
    print(f"in-process, lazy counting: pool {r['pool_docs']} docs, setup {r['setup_s']:.1f}s, {r['per_example_ms']:.1f} ms/example, "
          f"one tokenization {r['tokenize_ms']:.1f} ms, ratio {r['ratio']:.2f} (median {r['ratio_median']:.2f}, "
          f"amortized over 7,500 examples {r['ratio_amortized']:.2f}), counting {r['count_ms']:.1f} ms/example, "
          f"outside window {r['outside_pct']:.1f}%, {r['exact_per_example']:.2f} full tokenizations/example, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB")
    scaling = [dask_run(paths, args.target, args.examples, w) for w in args.workers]
    for s in scaling:
        print(f"dask {s['workers']} worker(s): {s['examples_per_s_build']:.1f} examples/s building "
              f"({s['examples_per_s_wall']:.1f}/s wall incl. {s['setup_s']:.1f}s setup; "
              f"{s['examples_per_cpu_s']:.1f} per CPU-second), "
              f"peak RSS/worker {s['peak_rss_mb']:.0f} MB")
    needles = needles_run(str(tok_dir), str(rej_path), args.target, min(args.examples, 50))
    print(f"needles (multi-key, 20 keys): {needles['ms']:.1f} ms/example, ratio {needles['ratio']:.2f}")
    load_after = os.getloadavg()[0]

    machine = f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}"
    rows = [
        ("time per example (in-process)", f"{r['per_example_ms']:.1f} ms"),
        ("one tokenization of its final prompt (right after building it)", f"{r['tokenize_ms']:.1f} ms"),
        ("ratio (target <= 2.0), lazy counting: every distractor counted fresh",
         f"{r['ratio']:.2f} (median {r['ratio_median']:.2f})"),
        ("of which lazy document counting", f"{r['count_ms']:.1f} ms/example"),
        ("ratio amortized at the report's scale (7,500 examples, whole pool counted once)",
         f"{r['ratio_amortized']:.2f}"),
        ("prompts outside [target - 2%, target]", f"{r['outside_pct']:.1f}% (mean {r['tokens_mean']:.0f} tokens)"),
        ("full tokenizations per example", f"{r['exact_per_example']:.2f}"),
        ("pool setup (read, parse, dedupe)", f"{r['setup_s']:.1f} s; peak RSS {r['peak_rss_mb']:.0f} MB"),
        ("pool counted upfront (pool_counting=upfront): setup, then ms/example and ratio",
         (f"{upfront['setup_s']:.1f} s, then {upfront['per_example_ms']:.1f} ms/example vs "
          f"{upfront['tokenize_ms']:.1f} ms, ratio {upfront['ratio']:.2f} (median {upfront['ratio_median']:.2f})")),
        *((f"examples/s, {s['workers']} Dask worker(s)",
           (f"{s['examples_per_s_build']:.1f} building, {s['examples_per_s_wall']:.1f} wall incl. setup, "
            f"{s['examples_per_cpu_s']:.1f} per CPU-second; peak RSS/worker {s['peak_rss_mb']:.0f} MB"))
          for s in scaling),
    ]
    rows.append(("RULER multi-key needles (20 keys) at the same target: ms/example, ratio",
                 f"{needles['ms']:.1f} ms, {needles['ratio']:.2f} (RULER's generator: 40-200 ms)"))
    if len(scaling) >= 2:
        speedup = scaling[1]["examples_per_s_build"] / scaling[0]["examples_per_s_build"]
        rows.append(("2-worker / 1-worker speed-up (building)", f"{speedup:.2f}x"))
    lines = [
        "",
        f"## KeyChain (bench_keychain, {time.strftime('%Y-%m-%d')})",
        "",
        (f"Machine: {machine}, load average {load_before:.1f} before / {load_after:.1f} after. Pool: {args.seeds} "
         f"synthetic seeds, {r['pool_docs']} distractor documents "
         f"(filtered-out seeds), own byte-level BPE (8192). Target {args.target} tokens, {args.examples} examples, "
         "defaults otherwise (uuid32, 2 hops, 0.5 distractor chains/1K, uniform placement)."),
        "",
        "| measure | value |",
        "| --- | --- |",
        *(f"| {k} | {v} |" for k, v in rows),
    ]
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

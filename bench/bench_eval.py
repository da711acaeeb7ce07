"""Evaluation: strategies at matched budget, evaluation throughput, the robustness gap and the context ablation.

``known``: a test double of known skills (``inference.testing.HeavyTestEngine``: each trajectory right with
probability ``--p`` among three wrong answers; a summary that boxes the right answer with probability ``--skill``
when an attempt holds it, else the attempts' most common answer) on ``--items`` prompts, widths 1-16. Single sample,
self-consistency, best-of-k (the oracle) and Heavy Thinking each get accuracy with a bootstrap 95% interval against
mean generated tokens per item, and Heavy Thinking is set beside self-consistency interpolated at the same tokens
(LongCat-Flash-Thinking-2601 section 4: the comparison at matched budget the report asserts). Best-of-k has a closed
form, ``1 - (1 - p)^k``, printed beside it: the check that the accounting works as designed.

``tiny``: the pipeline's tiny policy (a model artifact of the data root) on the math suite: the same budget curves,
and evaluation throughput (items/s) at engine batch sizes, side by side in one run on this machine's cores.

``robustness``: the tiny policy on Random Complex Tasks clean vs their noisy twins (the ``noise`` suite, small
environments for its 4,096 positions): the gap per noise level with intervals; and the context-management ablation
(the ``context`` suite: none, summary at two thresholds, discard-all, hybrid) on the longest tasks.

    .venv/bin/python -m bench.bench_eval known [--items 300] [--p 0.3] [--skill 0.9] [--no-record]
    .venv/bin/python -m bench.bench_eval tiny --data-dir data [--items 16] [--no-record]
    .venv/bin/python -m bench.bench_eval robustness --data-dir data [--items 6] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads (RESULTS.md, inference)

import polars as pl

from bench import report

FIGURES = Path(__file__).with_name("figures")
STRATEGIES = ("single", "self_consistency", "best_of_k", "heavy_thinking")


def _run(engine: Any, items: Sequence[Any], suite: str, config: Any, strategies: Sequence[str],
         breakdowns: Sequence[str] = ()) -> tuple[pl.DataFrame, pl.DataFrame, float]:
    from inference.evaluation.strategies import Context, run_items
    from inference.evaluation.summary import summarize
    from training.records import EVAL_ITEM

    start = time.perf_counter()
    outcome = run_items(engine, items, Context(suite, "bench", config, frozenset(), tuple(strategies)))
    elapsed = time.perf_counter() - start
    rows = EVAL_ITEM.frame(outcome.rows)
    return rows, summarize(rows, breakdowns, config.ks, resamples=1000), elapsed


def _ci(row: Mapping[str, Any]) -> str:
    if row["estimate"] is None:
        return "n/a"
    if row["ci_lo"] is None:
        return f"{row['estimate']:.3f}"
    return f"{row['estimate']:.3f} [{row['ci_lo']:.3f}, {row['ci_hi']:.3f}]"


def budget_lines(summary: pl.DataFrame, expected: Mapping[tuple[str, int], float] | None = None) -> list[str]:
    """A table of every strategy and width over all items, then Heavy Thinking against self-consistency at the same
    tokens."""
    overall = summary.filter((pl.col("group") == "all") & (pl.col("metric") == "accuracy")).sort("strategy", "k")
    lines = ["| strategy | k | tokens/item | accuracy [95% CI] | expected |", "| --- | --- | --- | --- | --- |"]
    for row in overall.iter_rows(named=True):
        want = (expected or {}).get((row["strategy"], row["k"]))
        lines.append(f"| {row['strategy']} | {row['k']} | {row['tokens']:.0f} | {_ci(row)} | "
                     f"{'' if want is None else f'{want:.3f}'} |")
    matched = summary.filter((pl.col("metric") == "sc_at_budget") & (pl.col("group") == "all")).sort("k")
    heavy = {r["k"]: r for r in overall.filter(pl.col("strategy") == "heavy_thinking").iter_rows(named=True)}
    if not matched.is_empty():
        lines += ["", ("Matched budget (self-consistency interpolated at Heavy Thinking's tokens, linear in log "
                  "tokens):"), "", ("| Heavy Thinking k | tokens/item | Heavy Thinking [95% CI] | "
                  "self-consistency at that budget | difference |"), "| --- | --- | --- | --- | --- |"]
        for row in matched.iter_rows(named=True):
            h = heavy[row["k"]]
            lines.append(f"| {row['k']} | {row['tokens']:.0f} | {_ci(h)} | {row['estimate']:.3f} | "
                         f"{h['estimate'] - row['estimate']:+.3f} |")
    missing = sorted(set(heavy) - set(matched["k"].to_list()))
    if missing:
        lines.append(f"\nHeavy Thinking at k = {missing} spent more tokens than self-consistency's widest point: no "
                     "matched comparison there.")
    return lines


def _figure(summary: pl.DataFrame, name: str, title: str) -> str:
    from inference.evaluation.report import budget_figure

    path = budget_figure({"m": summary}, title, FIGURES / f"{name}.png")
    return f"Figure: `bench/figures/{path.name}`." if path else "No figure (nothing scored)."


def simulated(p: float, skill: float, k: int, trials: int = 20_000, seed: int = 0) -> tuple[float, float]:
    """Self-consistency's and Heavy Thinking's expected accuracy under the test double's rules, by Monte Carlo
    (neither has a short closed form): three equally likely wrong answers; the vote's ties go to the first seen; the
    summary takes the right answer with probability ``skill`` when shown, else the most common in shown order."""
    import random

    from inference.metrics import majority_vote

    rng = random.Random(seed)
    sc = heavy = 0
    for _ in range(trials):
        answers = ["right" if rng.random() < p else rng.choice("abc") for _ in range(k)]
        sc += majority_vote(answers)[0] == "right"
        shown = rng.sample(answers, k)
        heavy += ("right" in shown and rng.random() < skill) or max(shown, key=shown.count) == "right"
    return sc / trials, heavy / trials


def known(args: argparse.Namespace) -> None:
    from inference.evaluation.items import EvalItem
    from inference.evaluation.strategies import EvalConfig
    from inference.testing import HeavyTestEngine

    def question(i: int) -> str:
        return f"Problem {i}: which value?"

    engine = HeavyTestEngine({question(i): (args.p, f"v{i}") for i in range(args.items)}, summary_skill=args.skill)
    items = [EvalItem(id=f"p{i}", kind="prompt", source="known", messages=[{"role": "user", "content": question(i)}],
                      reward="two_way", answer=f"v{i}") for i in range(args.items)]
    ks = (1, 2, 4, 8, 16)
    _, summary, elapsed = _run(engine, items, "known", EvalConfig(ks=ks, batch_size=64), STRATEGIES)
    expected = {("best_of_k", k): 1 - (1 - args.p) ** k for k in ks} | {("single", 1): args.p}
    for k in ks:
        expected[("self_consistency", k)], expected[("heavy_thinking", k)] = simulated(args.p, args.skill, k)
    report([f"\n## bench_eval known ({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores)",
            "", (f"Test double of known skills (inference.testing.HeavyTestEngine): {args.items} prompts, each "
            f"trajectory right with p = {args.p} among three wrong answers, summary skill {args.skill} (boxes the "
            "right answer when an attempt holds it, else the attempts' most common answer); 16 samples per item "
            "shared by every strategy; bootstrap 95% intervals over items. Expected: the closed forms (single = p, "
            "best-of-k = 1 - (1 - p)^k), and the double's rules simulated (self-consistency, Heavy Thinking)."),
            "", *budget_lines(summary, expected), "",
            _figure(summary, "eval_budget_known", "known skills"), f"Wall time {elapsed:.1f} s."], not args.no_record)


def _tiny_policy(data_dir: str) -> str:
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store

    found = Catalog(data_dir).entries(stage="tiny_policy", status="published")
    if not found:
        raise SystemExit(f"no published tiny_policy in {data_dir}: run `gymforge demo` first")
    return str(open_store(data_dir).get("tiny_policy", found[0].key).directory)


def _suite_items(data_dir: str, suite: str) -> list[Any]:
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from inference.evaluation.suites import get_suite
    from training.evaluate import suite_items

    store, catalog = open_store(data_dir), Catalog(data_dir)
    inputs = {}
    for name in get_suite(suite).stages:
        found = catalog.entries(stage=name, status="published")
        if not found:
            raise SystemExit(f"no published {name} in {data_dir}: run `gymforge refresh --profile tiny` first")
        inputs[name] = store.get(name, found[0].key)
    return suite_items(suite, inputs)


def _tiny_config(overrides: Mapping[str, Any]) -> Any:
    from flows.evaluate_model import settings

    return settings("tiny", overrides)


def tiny(args: argparse.Namespace) -> None:
    from inference.cpu import tune_allocator
    from inference.engine_factory import load_engine
    from inference.evaluation.strategies import cap

    tune_allocator()
    model = _tiny_policy(args.data_dir)
    every = _suite_items(args.data_dir, "math")
    items, many = cap(every, args.items), cap(every, args.throughput_items)
    config = _tiny_config({"max_items": None})
    engine = load_engine(f"hf:{model}", max_batch_size=32)
    rows, summary, elapsed = _run(engine, items, "math", config, STRATEGIES)
    single = rows.filter(pl.col("strategy") == "single")
    lines = [f"\n## bench_eval tiny ({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores)", "",
             (f"The pipeline's tiny policy ({Path(model).parent.name}) on {len(items)} items of the math suite, the tiny "
             f"profile's evaluate settings (widths {list(config.ks)}, {config.sampling.max_tokens} new tokens, Heavy "
             f"Thinking summaries of {config.heavy.summary_max_tokens}); bootstrap 95% intervals over items."), "",
             *budget_lines(summary), "", _figure(summary, "eval_budget_tiny", "tiny policy, math"),
             (f"Single samples with a boxed answer: {single['answer'].is_not_null().sum()} of {single.height}; "
             f"wall time {elapsed:.1f} s."), "",
             (f"Throughput on {len(many)} math items, one sample each, batch sizes interleaved over {args.rounds} "
             "rounds (the best round; the machine is shared):"), "",
             "| engine batch (items per call) | items/s |", "| --- | --- |"]
    one = _tiny_config({"ks": [1], "samples": 1, "max_items": None})
    best: dict[int, float] = {}
    for _ in range(args.rounds):
        for batch in args.batches:
            engine = load_engine(f"hf:{model}", max_batch_size=batch)
            _, _, seconds = _run(engine, many, "math", one.model_copy(update={"batch_size": batch}), ())
            best[batch] = min(best.get(batch, seconds), seconds)
    lines += [f"| {batch} | {len(many) / seconds:.2f} |" for batch, seconds in best.items()]
    report(lines, not args.no_record)


def robustness(args: argparse.Namespace) -> None:
    from inference.cpu import tune_allocator
    from inference.engine_factory import load_engine
    from inference.evaluation.strategies import cap
    from inference.evaluation.suites import get_suite

    tune_allocator()
    model = _tiny_policy(args.data_dir)
    engine = load_engine(f"hf:{model}", max_batch_size=16)
    noise = get_suite("noise")
    items = cap(_suite_items(args.data_dir, "noise"), args.items)
    config = _tiny_config({**noise.defaults, "max_items": None})
    rows, summary, elapsed = _run(engine, items, "noise", config, (), noise.breakdowns)
    gaps = summary.filter(pl.col("metric") == "gap").sort("group", "value")
    level = summary.filter((pl.col("metric") == "avg@k") & (pl.col("group") == "noise_level")).sort("value")
    lines = [(f"\n## bench_eval robustness ({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} "
             "cores)"), "", (f"The tiny policy on {len(items)} Random Complex Tasks of the tiny profile (clean tasks "
             f"with their noisy twins, small environments: task tools + {config.small_tools} distractors), "
             f"{config.n_samples} episodes per task, {config.max_turns} turns; bootstrap 95% intervals."), "",
             "| noise level | tasks | Avg@k [95% CI] |", "| --- | --- | --- |"]
    lines += [f"| {r['value']} | {r['n']} | {_ci(r)} |" for r in level.iter_rows(named=True)]
    lines += ["", "| gap (clean minus noisy) by | value | pairs | gap [95% CI] |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['group']} | {r['value']} | {r['n']} | {_ci(r)} |" for r in gaps.iter_rows(named=True)]
    failures = rows.filter(pl.col("strategy") == "sample")["failures"].to_list()
    lines.append(f"\nFailure labels over all episodes: {_failures(failures)}. Wall time {elapsed:.1f} s.")

    context = get_suite("context")
    long_items = cap(_suite_items(args.data_dir, "context"), args.context_items)
    config = _tiny_config({**context.defaults, "max_items": None, "samples": 2, "ks": [1, 2]})
    _, summary, elapsed = _run(engine, long_items, "context", config, ("context",), context.breakdowns)
    ablation = summary.filter(pl.col("strategy").str.starts_with("context:") & (pl.col("group") == "all"))
    lines += ["", (f"Context-management ablation on the {len(long_items)} longest tasks (golden chains of "
              f"{sorted({i.attributes['golden_calls'] for i in long_items})} calls), {config.n_samples} episodes "
              f"each, {config.max_turns} turns:"), "", "| context strategy | Avg@k [95% CI] | tokens/item |",
              "| --- | --- | --- |"]
    lines += [f"| {r['strategy'].removeprefix('context:')} | {_ci(r)} | {r['tokens']:.0f} |"
              for r in ablation.sort("strategy").iter_rows(named=True)]
    lines.append(f"\nWall time {elapsed:.1f} s.")
    report(lines, not args.no_record)


def _failures(values: Sequence[str]) -> str:
    import json
    from collections import Counter

    total: Counter[str] = Counter()
    for value in values:
        total.update(json.loads(value or "{}"))
    return ", ".join(f"{k}: {v}" for k, v in sorted(total.items())) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    k = sub.add_parser("known", help="strategies at matched budget on a test double of known skills")
    k.add_argument("--items", type=int, default=300)
    k.add_argument("--p", type=float, default=0.3)
    k.add_argument("--skill", type=float, default=0.9)
    t = sub.add_parser("tiny", help="the tiny policy's budget curves and throughput on the math suite")
    t.add_argument("--items", type=int, default=16)
    t.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    t.add_argument("--throughput-items", type=int, default=64)
    t.add_argument("--rounds", type=int, default=2)
    r = sub.add_parser("robustness", help="the tiny policy's robustness gap and context ablation")
    r.add_argument("--items", type=int, default=6)
    r.add_argument("--context-items", type=int, default=2)
    for p in (t, r):
        p.add_argument("--data-dir", default=os.environ.get("GYMFORGE_DATA", "data"))
    for p in (k, t, r):
        p.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()
    {"known": known, "tiny": tiny, "robustness": robustness}[args.command](args)


if __name__ == "__main__":
    main()

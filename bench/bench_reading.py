"""Does a model read long context? Greedy answers to held-out ``reading_curriculum`` rows (links ``KEY: "value"``
in world documents: a needle, one-hop and two-hop chains), scored per level as the boxed value equal to the row's,
with a percentile bootstrap 95% interval over rows. The held-out rows come from another partition than the
training rows (another seed stream: other keys, values and documents).

    .venv/bin/python -m bench.bench_reading --model KEY_OR_DIR --heldout KEY [--data-dir DIR] [--per-level 100]
        [--label "after the 256-token phase"] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench import report
from bench.bench_rl import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="data root (default $GYMFORGE_DATA, else ./data)")
    parser.add_argument("--model", required=True, help="model artifact key or stage, or a transformers directory")
    parser.add_argument("--heldout", required=True, help="a reading_curriculum artifact key of another partition "
                        "than the model trained on")
    parser.add_argument("--per-level", type=int, default=100, help="held-out rows per level")
    parser.add_argument("--label", default="", help="what the model is, for the table")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from flows.train import published
    from inference.engine import Request, SamplingParams
    from inference.hf_engine import HFEngine
    from inference.metrics import bootstrap_ci
    from tasks.longctx.math_seeds import extract_boxed

    root = data_root(args.data_dir)
    catalog, store = Catalog(root), open_store(root)
    heldout = published(catalog, store, args.heldout)
    rows = heldout.read("trajectories").sort("id").group_by("domain", maintain_order=True).head(args.per_level)
    model = Path(args.model) if Path(args.model).is_dir() else published(catalog, store, args.model).directory
    engine = HFEngine.load(model)
    started = time.perf_counter()
    requests, wanted = [], []
    for row in rows.to_dicts():
        messages = json.loads(row["messages"])
        requests.append(Request(messages[:1], sampling=SamplingParams(temperature=0.0, max_tokens=24)))
        wanted.append((row["domain"], extract_boxed(messages[1]["content"])))
    answers = [extract_boxed(samples[0].text) for samples in engine.generate(requests)]
    hits: dict[str, list[float]] = {}
    for (level, value), answer in zip(wanted, answers, strict=True):
        hits.setdefault(level, []).append(float(answer == value))
    lines = ["", f"## Reading: held-out link look-ups ({time.strftime('%Y-%m-%d')}, {machine()})", "",
             (f"`python -m bench.bench_reading --model {args.model} --heldout {args.heldout}`"
              f"{' (' + args.label + ')' if args.label else ''}: greedy, 24 tokens, {len(requests)} held-out rows "
              f"of `reading_curriculum` {heldout.key} (partition {heldout.manifest.get('partition', '?')}, "
              f"{int(rows['tokens'].median())} tokens median), {time.perf_counter() - started:.0f} s."), "",
             "| level | rows | boxed value right [95% CI] |", "|---|---|---|"]
    for level in ("needle", "one_hop", "two_hop"):
        if level in hits:
            ci = bootstrap_ci(hits[level], resamples=2_000)
            lines.append(f"| {level} | {len(hits[level])} | {ci.value:.2f} [{ci.lo:.2f}, {ci.hi:.2f}] |")
    report(lines, record=not args.no_record)


if __name__ == "__main__":
    main()

"""The mid-training routes at the tiny profile as a reader sees them: per route, kept and rejected rows with the
reasons, the share of kept rows within the route's window and within sft_set's (the SFT length), how many of the
longer environment rows sft_set's step compression brings within its window (and re-verify), and sampled rows'
first lines.

It runs what ``gymforge midtrain --routes env,decompose,reason,plan,text --n N`` runs (the same overrides, through
the store, so a data root that already holds the artifacts is reused), then reads the published artifacts.

    .venv/bin/python -m bench.bench_midtrain_habits [--n 24] [--data-dir DIR] [--samples 10] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

ROUTES = ("env", "decompose", "reason", "plan", "text")
EPISODE_ROUTES = ("env", "decompose", "reason", "plan")


def _reason(text: str) -> str:
    """A rejection reason without its row-specific values: the kind and the first clause."""
    kind, _, rest = text.partition(": ")
    rest = rest.split(" (")[0]
    return f"{kind}: {rest[:70]}" if kind != "too_long" else "too_long"


def _first_lines(row: dict[str, Any]) -> str:
    messages = json.loads(row["messages"])
    user = next(m["content"] for m in messages if m["role"] == "user")
    agent = next(m.get("content") or "" for m in messages if m["role"] == "assistant")
    final = messages[-1].get("content") or ""
    return " | ".join(" ".join(str(t).split())[:150] for t in (user, agent, final))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=24)
    parser.add_argument("--data-dir", default=None, help="data root (default: a new temporary directory)")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from envgen.trajectory_checks import EXECUTION, verify_row
    from flows.cli.midtrain import ROUTES as STAGES
    from flows.cli.midtrain import route_overrides
    from flows.dag import materialize
    from flows.profiles import stage_params
    from tasks.midtrain.routes import TrajectoryParams, token_counter
    from tasks.midtrain.sft_set import compress_steps

    data_dir = args.data_dir or tempfile.mkdtemp(prefix="bench-habits-")
    targets = [STAGES[r] for r in ROUTES]
    artifacts = materialize([*targets, "tokenizer"], profile="tiny", overrides=route_overrides(list(ROUTES), args.n,
                                                                                               None),
                            data_dir=data_dir)
    sft_max = stage_params("tiny", {})["sft_set"]["max_tokens"]
    count = token_counter(TrajectoryParams(), {"tokenizer": artifacts["tokenizer"]})
    keep_last = stage_params("tiny", {})["sft_set"].get("compress_keep_last", 2)
    lines = [f"## Mid-training routes read as a model would (bench_midtrain_habits.py, {date.today().isoformat()})", "",
             (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}. "
             f"`gymforge midtrain --routes {','.join(ROUTES)} --n {args.n}` at the tiny profile, reference teacher "
             f"(env routes keep rows up to their `max_tokens`; sft_set's window is {sft_max})."), "",
             "| route | kept | rejected | played rows within route max_tokens | kept within sft_set's " + str(sft_max)
             + " | longer rows step compression brings within it | rejection reasons |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    sampled: list[tuple[str, dict[str, Any]]] = []
    for route in ROUTES:
        artifact = artifacts[STAGES[route]]
        kept = artifact.read("trajectories").to_dicts()
        rejected = artifact.read("rejected").to_dicts()
        route_max = stage_params("tiny", {})[STAGES[route]]["max_tokens"]
        within = sum(r["tokens"] <= route_max for r in kept)
        short = sum(r["tokens"] <= sft_max for r in kept)
        longer = [r for r in kept if r["tokens"] > sft_max and r["verifier"] == EXECUTION]
        compressed = 0
        for r in longer:
            messages, summarized = compress_steps(json.loads(r["messages"]), keep_last)
            tokens = count(messages, json.loads(r["tools"]))
            limits = {**json.loads(r["verify_input"]), "limits": {"max_tokens": sft_max, "heldout": []}}
            row = {**r, "messages": json.dumps(messages), "tokens": tokens, "verify_input": json.dumps(limits)}
            compressed += bool(summarized and tokens <= sft_max and verify_row(row) is None)
        reasons = Counter(_reason(r["reason"]) for r in rejected)
        played = len(kept) + reasons["too_long"]  # rows that were played and measured
        lines.append(f"| {route} | {len(kept)} | {len(rejected)} | {within}/{played} ({within / max(played, 1):.0%}) "
                     f"| {short}/{len(kept)} | {compressed}/{len(longer)} | "
                     + ("; ".join(f"{k} ({v})" for k, v in reasons.most_common()) or "-") + " |")
        sampled += [(route, r) for r in kept]
    refusals = sum("/refusal" in r["id"] for route, r in sampled if route == "env")
    lines += ["", f"Refusal rows among env's kept rows: {refusals}.", "",
              f"{args.samples} sampled rows (seed 0), first user line | first agent line | final line:", ""]
    for route, row in random.Random(0).sample(sampled, min(args.samples, len(sampled))):
        lines.append(f"- `{route}` {row['tokens']} tokens: {_first_lines(row)}")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_record:
        results = Path(__file__).with_name("RESULTS.md")
        results.write_text(results.read_text() + "\n" + text)


if __name__ == "__main__":
    main()

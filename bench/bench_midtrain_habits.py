"""The trajectory stages at the tiny profile as a reader sees them: per mid-training route, kept and rejected rows
with the reasons and the share of rows within the windows; then, over every whole artifact a model trains on
(small_envs, each route, research_trajectories) and the noisy tasks, a count of each defect the trajectory standard
refuses (``envgen.trajectory_standard``), the sentence-frame diversity, how many base tasks the rows come from, and
ten sampled rows' first lines per artifact.

It runs what ``gymforge midtrain --routes env,decompose,reason,plan,text --n N`` runs (the same overrides, through
the store, so a data root that already holds the artifacts is reused) plus small_envs, noisy_tasks and
research_trajectories, then reads the published artifacts. ``--read ROOT`` reads a data root another run published
(each stage's one published artifact) without running anything: how a root built by older code is measured.

    .venv/bin/python -m bench.bench_midtrain_habits [--n 24] [--data-dir DIR | --read ROOT] [--label L]
        [--samples 10] [--no-record]
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
TRAJECTORY_STAGES = ("small_envs", "midtrain_env", "midtrain_decompose", "midtrain_reason", "midtrain_plan",
                     "midtrain_text", "research_trajectories")
NOISE_STAGE = "noisy_tasks"
GENERIC_FINAL = "Your request is complete."


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


def base_task(row: dict[str, Any]) -> str:
    """The task a row was played from: variants, refusals and augmentations of one task share it."""
    return str(row.get("task_id") or row.get("seed_id") or row["id"]).removesuffix("-refusal")


def trajectory_defects(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per defect, the rows that have it; and the figures read over the whole artifact."""
    from envgen.trajectory_standard import (
        HABITS,
        internal_key_told,
        rejected_candidates,
        role_texts,
        uninformative_result,
    )
    from envgen.wording import frame_share, sentence_frame, sentences

    out: dict[str, Any] = {"rows": len(rows), "base tasks": len({base_task(r) for r in rows})}
    for habit in HABITS:
        out[habit.name] = sum(habit.problem(r) is not None for r in rows)
    told = [internal_key_told(r) or "" for r in rows]
    out["user states internal key"] = sum("user states" in t for t in told)
    out["agent asks internal key"] = sum("agent asks" in t for t in told)
    messages = [json.loads(r["messages"]) for r in rows]
    finals = [str(m[-1].get("content") or "") for m in messages]
    out["final 'Your request is complete.'"] = sum(f.startswith(GENERIC_FINAL) for f in finals)
    share, total, _ = frame_share(t for m in messages for t in role_texts(m, "assistant"))
    out["top-10 frames of assistant sentences"] = f"{share:.0%} of {total}"
    users = [s for m in messages for t in role_texts(m, "user") for s in sentences(t)]
    mine = sum(sentence_frame(s) == "my <> is <>" for s in users)
    out["user sentences 'My <X> is <V>.'"] = f"{mine / max(len(users), 1):.0%} of {len(users)}"
    candidates = [c for r in rows for c in rejected_candidates(r)]
    if candidates:
        out["rejected candidates"] = len(candidates)
        out["candidates naming a tool not offered"] = sum(not c.offered for c in candidates)
        with_id = [c for c in candidates if c.row is not None]
        out["candidate ids nowhere earlier"] = f"{sum(not c.seen for c in with_id)} of {len(with_id)}"
    results = [m for ms in messages for m in ms if m.get("role") == "tool"]
    stubs = sum(str(m.get("content") or "").startswith('{"ok":true') and '":{' not in str(m.get("content"))
                for m in results)
    out["bare {ok: true, ...} results"] = f"{stubs} of {len(results)}"
    out["rows with an echoed result"] = sum(uninformative_result(r) is not None for r in rows)
    return out


def noise_defects(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    from envgen.noise.instruction import greetings, insertion_problems, wording_problem

    records = [json.loads(t["noise"])["transforms"] for t in tasks]
    return {"tasks": len(tasks),
            "vague insertions": sum("replaced_with" in tr["changed"] for r in records for tr in r),
            "ungrammatical insertions": sum(len(insertion_problems(t["description"], r))
                                            for t, r in zip(tasks, records, strict=True)),
            "open with two greetings": sum(greetings(t["description"]) > 1 for t in tasks),
            "tasks with any wording problem": sum(wording_problem(t["description"], r) is not None
                                                  for t, r in zip(tasks, records, strict=True))}


def _read_root(root: str) -> dict[str, Any]:
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from flows.train import published

    catalog, store = Catalog(root), open_store(Path(root))
    stages = [*TRAJECTORY_STAGES, NOISE_STAGE, *(f"midtrain_{r}" for r in ROUTES)]
    return {s: published(catalog, store, s) for s in dict.fromkeys(stages)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=None, help="items per route (default: the tiny profile's)")
    parser.add_argument("--data-dir", default=None, help="data root (default: a new temporary directory)")
    parser.add_argument("--read", default=None, help="read the artifacts a data root holds; run nothing")
    parser.add_argument("--label", default=None, help="what the measured root is (before, after)")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from flows.cli.midtrain import ROUTES as STAGES
    from flows.cli.midtrain import route_overrides
    from flows.profiles import stage_params

    if args.read:
        artifacts, where = _read_root(args.read), f"the published artifacts of {args.read}"
    else:
        from flows.dag import materialize

        data_dir = args.data_dir or tempfile.mkdtemp(prefix="bench-habits-")
        artifacts = materialize([*TRAJECTORY_STAGES, NOISE_STAGE], profile="tiny",
                                overrides=route_overrides(list(ROUTES), args.n, None), data_dir=data_dir)
        where = (f"`gymforge midtrain --routes {','.join(ROUTES)}{f' --n {args.n}' if args.n else ''}` plus "
                 f"small_envs, noisy_tasks and research_trajectories at the tiny profile in {data_dir}")
    tiny = stage_params("tiny", {})
    sft_max = tiny["sft_set"]["max_tokens"]
    label = f" ({args.label})" if args.label else ""
    lines = [(f"## Trajectory stages read as a model would{label} (bench_midtrain_habits.py, "
             f"{date.today().isoformat()})"), "",
             (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}. {where}, "
             f"reference teacher (sft_set's window is {sft_max} tokens)."), "",
             "| route | kept | rejected | kept within route max_tokens | kept within sft_set's " + str(sft_max)
             + " | rejection reasons |", "| --- | --- | --- | --- | --- | --- |"]
    for route in ROUTES:
        artifact = artifacts[STAGES[route]]
        kept = artifact.read("trajectories").to_dicts()
        reasons = Counter(_reason(r["reason"]) for r in artifact.read("rejected").to_dicts())
        route_max = tiny[STAGES[route]]["max_tokens"]
        lines.append(f"| {route} | {len(kept)} | {sum(reasons.values())} | "
                     f"{sum(r['tokens'] <= route_max for r in kept)}/{len(kept)} | "
                     f"{sum(r['tokens'] <= sft_max for r in kept)}/{len(kept)} | "
                     + ("; ".join(f"{k} ({v})" for k, v in reasons.most_common(6)) or "-") + " |")
    rows = {stage: artifacts[stage].read("trajectories").to_dicts() for stage in TRAJECTORY_STAGES}
    counts = {stage: trajectory_defects(rows[stage]) for stage in TRAJECTORY_STAGES}
    names = list(dict.fromkeys(k for c in counts.values() for k in c))
    lines += ["", "Defects counted over each whole artifact (rows that have it; `-`: the figure does not apply):", "",
              "| defect | " + " | ".join(TRAJECTORY_STAGES) + " |", "| --- |" + " --- |" * len(TRAJECTORY_STAGES)]
    lines += [f"| {name} | " + " | ".join(str(counts[s].get(name, "-")) for s in TRAJECTORY_STAGES) + " |"
              for name in names]
    noise = noise_defects(artifacts[NOISE_STAGE].read("tasks").to_dicts())
    lines += ["", "noisy_tasks: " + ", ".join(f"{k} {v}" for k, v in noise.items()) + ".", ""]
    rng = random.Random(0)
    for stage in TRAJECTORY_STAGES:
        lines += [f"{stage}: {args.samples} sampled rows (seed 0), first user line | first agent line | final line:",
                  ""]
        lines += [f"- {row['tokens']} tokens: {_first_lines(row)}"
                  for row in rng.sample(rows[stage], min(args.samples, len(rows[stage])))]
        lines.append("")
    tasks = artifacts[NOISE_STAGE].read("tasks").to_dicts()
    lines += [f"{NOISE_STAGE}: {args.samples} sampled task texts (seed 0):", ""]
    lines += [f"- {' '.join(t['description'].split())[:220]}" for t in rng.sample(tasks, min(args.samples, len(tasks)))]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_record:
        results = Path(__file__).with_name("RESULTS.md")
        results.write_text(results.read_text() + "\n" + text)


if __name__ == "__main__":
    main()

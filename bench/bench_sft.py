"""Cold-start SFT on 2 cores: does it teach the tiny model to call tools, and what a training token costs.

``learning``: the small environments' tasks split by a stable hash of their ids (bench_rl's split: half held out);
the SFT data (``--data``, default the cold-start set and the small environments' golden trajectories) minus every
row of a held-out task; the profile's ``sft`` config. Before and after training, on the held-out tasks:

- valid tool calls, teacher-forced (``training/sft_eval.py``): at every tool-calling turn of a held-out golden
  trajectory the model continues the conversation so far (greedy) and its first call is scored: a parsable call,
  the right tool with schema-valid arguments (the issue's "valid"), the exact arguments;
- environment reward: ``--k`` free-running episodes per held-out task in its small environment, sampled and scored
  as RL samples them (``training/async_rl/controllers.py``).

Differences are paired (per turn, per task) with percentile bootstrap 95% intervals (``inference/metrics.py``).

``curve``: the learning curves a profile's SFT budget is chosen from: for each training-set size of ``--sizes``
(the first N training trajectories in a seeded order), one run of ``--max-steps`` steps evaluated every
``--eval-every`` steps on the held-out turns (teacher-forced, as above) of ``--heldout-from``'s held-out tasks (the
small environments by default, which also play free episodes at the end); a table and a PNG of parsable and valid
call rates against steps, one line each per size.

``throughput``: the same training rows and config for ``--steps`` steps with and without packing (best-fit
decreasing, padding-free), side by side: trained-on tokens per second (non-padding input tokens / train runtime) and
padding waste (pad positions / all positions over one epoch of the trainer's own batches).

    .venv/bin/python -m bench.bench_sft learning [--data-dir DIR] [--base tiny_policy] [--max-steps N] [--no-record]
    .venv/bin/python -m bench.bench_sft curve [--data small_envs] [--sizes 64 256 1024] [--max-steps 600]
        [--heldout-from midtrain_env]
    .venv/bin/python -m bench.bench_sft throughput [--data-dir DIR] [--steps 10] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads (RESULTS.md, inference)

from bench import report
from bench.bench_rl import heldout, machine
from data_contracts.plotting import save_figure

# --- inputs ------------------------------------------------------------------------------------------------------


def resolve(args: argparse.Namespace) -> tuple[Path, Any, list[Any], Any]:
    """``(base directory, sft params, held-out environment tasks, training trajectories)``."""
    import polars as pl

    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from flows.profiles import parse, stage_params
    from flows.train import published
    from training.async_rl.sources import load_tasks
    from training.sft_data import read_trajectories

    root = data_root(args.data_dir)
    store, catalog = open_store(root), Catalog(root)
    base_path = Path(args.base)
    base_dir = base_path if base_path.is_dir() else Path(published(catalog, store, args.base).directory)
    overrides = {"max_steps": args.max_steps} if getattr(args, "max_steps", None) else {}
    params = parse("sft", stage_params(args.profile, {"sft": overrides})["sft"])
    small = published(catalog, store, "small_envs")
    tasks = [t for t in load_tasks({"small_envs": small}) if t.kind == "env" and heldout(t.task_id)]
    held = {t.task_id for t in tasks}
    artifacts = {}
    for ref in args.data:
        artifact = published(catalog, store, ref)
        artifacts[artifact.stage] = artifact
    frame = read_trajectories(artifacts).filter(~pl.col("task_id").is_in(sorted(held)).fill_null(False))
    return base_dir, params, tasks[: args.max_heldout], frame


def held_out_turns(data_dir: str | None, tasks: Sequence[Any]) -> list[Any]:
    """Every tool-calling turn of the held-out tasks' golden trajectories."""
    from training.sft_eval import call_turns

    rows = held_out_frame(data_dir, "small_envs", [t.task_id for t in tasks], len(tasks))
    return call_turns(rows.to_dicts(), limit=1 << 30)


def rows_of(frame: Any, tokenizer: Any, max_length: int) -> tuple[list[dict], Any]:
    import json

    from training.sft_data import build_examples

    examples, rejected = build_examples(frame, tokenizer, max_length)
    return [example.row(json.loads(row["messages"])) for example, row in examples], rejected


# --- learning ------------------------------------------------------------------------------------------------------


def measure(model: Any, tokenizer: Any, model_dir: Path, turns: Sequence[Any], tasks: Sequence[Any],
            args: argparse.Namespace) -> tuple[list[dict[str, bool]], dict[str, list[float]]]:
    from inference.engine_factory import load_engine
    from training.async_rl.config import RLConfig
    from training.async_rl.controllers import score_tasks
    from training.sft_eval import score_turns

    config = RLConfig(concurrency=args.concurrency, seed=0,
                      sampling={"max_tokens": args.max_tokens, "max_turns": args.max_turns})
    scores = score_turns(model, tokenizer, turns, max_new_tokens=args.max_tokens)
    rewards = score_tasks(load_engine(f"hf:{model_dir}"), tasks, args.k, config)
    return scores, rewards


def learning(args: argparse.Namespace) -> None:
    from inference.checkpoint import save_model
    from inference.metrics import bootstrap_ci, paired_bootstrap_ci
    from training.sft import fit, load_base
    from training.sft_eval import FIGURES

    base_dir, params, tasks, frame = resolve(args)
    turns = held_out_turns(args.data_dir, tasks)
    model, tokenizer, _ = load_base(base_dir)
    train_rows, rejected = rows_of(frame, tokenizer, params.max_length)
    started = time.perf_counter()
    print(f"before: {len(turns)} held-out turns, {len(tasks)} tasks x {args.k} episodes ...", flush=True)
    before = measure(model, tokenizer, base_dir, turns, tasks, args)
    scratch = Path(tempfile.mkdtemp(prefix="bench-sft-"))
    try:
        print(f"sft: {len(train_rows)} trajectories, {params.max_steps} steps ...", flush=True)
        trained, history = fit(model, tokenizer, train_rows, [], [], params, scratch / "trainer", None)
        save_model(trained, tokenizer, scratch / "model", {"base": str(base_dir), "method": "sft"})
        after = measure(trained, tokenizer, scratch / "model", turns, tasks, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.perf_counter() - started
    end = history[-1]
    per_s = end.get("num_input_tokens_seen", 0) / max(end.get("train_runtime", 0.0), 1e-9)
    sources = frame["source"].value_counts().sort("source").iter_rows()
    lines = ["", (f"## Cold-start SFT: learning on held-out environment tasks ({time.strftime('%Y-%m-%d')}, "
                  f"{machine()})"), "",
             (f"`python -m bench.bench_sft learning`: base `{args.base}`, trained on `{', '.join(args.data)}` "
              f"({len(train_rows)} trajectories after setting aside {rejected.height}; by route: "
              f"{dict(sources)}), every row of a held-out task removed; profile `{args.profile}`: "
              f"{params.max_steps} steps of {params.per_device_train_batch_size} (lr {params.learning_rate:g}, "
              f"{params.lr_scheduler_type}), {per_s:,.0f} trained-on tokens/s; wall {wall / 60:.1f} min. Held out: "
              f"{len(tasks)} small-environment tasks ({len(turns)} tool-calling turns teacher-forced, greedy; "
              f"{args.k} free episodes per task, up to {args.max_turns} turns of {args.max_tokens} tokens). "
              "Differences paired per turn / per task, percentile bootstrap 95% intervals."), "",
             "| held-out figure | n | before | after [95% CI] | difference [95% CI] |", "|---|---|---|---|---|"]
    for name in FIGURES:
        b = [float(s[name]) for s in before[0]]
        a = [float(s[name]) for s in after[0]]
        lines.append(row(name.replace("_", " ") + " rate", b, a, bootstrap_ci, paired_bootstrap_ci))
    ids = [t.task_id for t in tasks]
    b = [sum(before[1][i]) / len(before[1][i]) for i in ids]
    a = [sum(after[1][i]) / len(after[1][i]) for i in ids]
    lines.append(row("environment reward (mean of k per task)", b, a, bootstrap_ci, paired_bootstrap_ci))
    losses = [e["loss"] for e in history if "loss" in e]
    lines += ["", (f"Training loss (trained assistant tokens), first vs last logged: {losses[0]:.3f} -> "
                   f"{losses[-1]:.3f}. Targets (issue 11): valid-call rate >= 90% after SFT, reward above the "
                   "base model's with an interval that excludes equality."), ""]
    report(lines, record=not args.no_record)


def row(name: str, before: Sequence[float], after: Sequence[float], ci: Any, paired: Any) -> str:
    if not before:
        return f"| {name} | 0 | - | - | - |"
    a, d = ci(list(after), resamples=10_000), paired(list(after), list(before), resamples=10_000)
    return (f"| {name} | {len(before)} | {sum(before) / len(before):.3f} | {a.value:.3f} [{a.lo:.3f}, {a.hi:.3f}] | "
            f"{d.value:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}] |")


# --- curve ---------------------------------------------------------------------------------------------------------


def curve(args: argparse.Namespace) -> None:
    import random

    import polars as pl

    from inference.checkpoint import save_model
    from inference.metrics import bootstrap_ci
    from training.sft import fit, load_base
    from training.sft_eval import call_turns

    base_dir, params, tasks, frame = resolve(args)
    held = held_out_frame(args.data_dir, args.heldout_from, [t.task_id for t in tasks] if args.heldout_from ==
                          "small_envs" else None, args.max_heldout)
    frame = frame.filter(~pl.col("task_id").is_in(held["task_id"].unique().to_list()).fill_null(False))
    if args.heldout_from != "small_envs":
        tasks = []  # its rows' environments are not tasks of an artifact: validity only, no free episodes
    turns = call_turns(held.to_dicts(), limit=1 << 30)
    tokenizer = load_base(base_dir)[1]
    rows, _ = rows_of(frame, tokenizer, params.max_length)
    random.Random(0).shuffle(rows)
    eval_rows, _ = rows_of(held, tokenizer, params.max_length)
    arm = params.model_copy(update={"max_steps": args.max_steps, "eval_steps": args.eval_every,
                                    "save_steps": 10 * args.max_steps})
    started = time.perf_counter()
    points: dict[int, list[tuple[int, float, float]]] = {}
    rewards: dict[int, Any] = {}
    for size in [n for n in args.sizes if n <= len(rows)] or [len(rows)]:
        scratch = Path(tempfile.mkdtemp(prefix="bench-sft-curve-"))
        try:
            print(f"size {size}: {args.max_steps} steps, held-out every {args.eval_every} ...", flush=True)
            model, history = fit(load_base(base_dir)[0], tokenizer, rows[:size], eval_rows, turns, arm,
                                 scratch / "trainer", None, progress=False)
            points[size] = sorted({(int(e["step"]), e["eval_tool_call_format"], e["eval_tool_call_valid"])
                                   for e in history if "eval_tool_call_valid" in e})
            if tasks:
                save_model(model, tokenizer, scratch / "model", {"base": str(base_dir), "method": "sft"})
                _, episode = measure(model, tokenizer, scratch / "model", [], tasks, args)
                rewards[size] = bootstrap_ci([sum(r) / len(r) for r in episode.values()], resamples=10_000)
            print(f"size {size}: (step, format, valid) {points[size]}; reward {rewards.get(size)}", flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    figure = plot_curve(points, Path(args.figure))
    lines = ["", (f"## Cold-start SFT: learning curves on held-out environment tasks ({time.strftime('%Y-%m-%d')}, "
                  f"{machine()})"), "",
             (f"`python -m bench.bench_sft curve`: base `{args.base}`, trained on `{', '.join(args.data)}` (the first "
              f"N of {len(rows)} trajectories in a seeded order, every row of a held-out task removed); profile "
              f"`{args.profile}`'s sft config with {args.max_steps} steps of {params.per_device_train_batch_size} "
              f"(lr {params.learning_rate:g}, {params.lr_scheduler_type}); held out: {held['task_id'].n_unique()} "
              f"tasks of `{args.heldout_from}`, {len(turns)} tool-calling turns teacher-forced (greedy) every "
              f"{args.eval_every} steps" + (f", {args.k} free episodes per task at the end" if tasks else "")
              + f"; wall {(time.perf_counter() - started) / 60:.1f} min."),
             "", "| trajectories | step | call format rate | valid call rate |", "|---|---|---|---|"]
    for size, curve_points in points.items():
        lines += [f"| {size} | {step} | {fmt:.3f} | {valid:.3f} |" for step, fmt, valid in curve_points]
    if rewards:
        lines += ["", "| trajectories | environment reward after [95% CI] |", "|---|---|"]
        lines += [f"| {size} | {r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}] |" for size, r in rewards.items()]
    lines += ["", f"![held-out call rates against steps]({os.path.relpath(figure, Path(__file__).parent)})", ""]
    report(lines, record=not args.no_record)


def held_out_frame(data_dir: str | None, stage: str, task_ids: Sequence[str] | None, limit: int) -> Any:
    """The held-out trajectories (the SFT run's eval split: its loss and validity): those of ``task_ids``, else
    the rows of up to ``limit`` tasks of ``stage`` held out by bench_rl's hash split."""
    import polars as pl

    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from flows.train import published

    root = data_root(data_dir)
    rows = published(Catalog(root), open_store(root), stage).read("trajectories")
    if task_ids is None:
        task_ids = sorted({t for t in rows["task_id"].drop_nulls() if heldout(t)})[:limit]
    return rows.filter(pl.col("task_id").is_in(list(task_ids))).sort("id")


def plot_curve(points: dict[int, list[tuple[int, float, float]]], path: Path) -> Path:
    with save_figure(path, figsize=(6, 3.5)) as (_, ax):
        for size, curve_points in points.items():
            steps = [p[0] for p in curve_points]
            [line] = ax.plot(steps, [p[2] for p in curve_points], marker="o", label=f"valid call, {size} traj.")
            ax.plot(steps, [p[1] for p in curve_points], marker="s", linestyle="--", color=line.get_color(),
                    label=f"parsable call, {size} traj.")
        ax.set_xlabel("SFT step")
        ax.set_ylabel("held-out rate (teacher-forced turns)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend()
    return path


# --- throughput ----------------------------------------------------------------------------------------------------


def padding_waste(trainer: Any) -> tuple[float, int]:
    """``(pad positions / all positions, batches)`` over one epoch of the trainer's training batches."""
    pad = total = batches = 0
    for batch in trainer.get_train_dataloader():
        ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        total += ids.numel()
        pad += 0 if mask is None else int((mask == 0).sum())  # padding-free batches carry no padding at all
        batches += 1
    return pad / max(total, 1), batches


def throughput(args: argparse.Namespace) -> None:
    from training.sft import load_base, make_trainer

    base_dir, params, _, frame = resolve(args)
    tokenizer = load_base(base_dir)[1]
    rows, _ = rows_of(frame, tokenizer, params.max_length)
    lengths = sorted(len(r["input_ids"]) for r in rows)
    results = {}
    for packing in (False, True):
        arm = params.model_copy(update={"packing": packing, "max_steps": args.steps, "save_steps": 10 * args.steps})
        scratch = Path(tempfile.mkdtemp(prefix="bench-sft-tp-"))
        try:
            trainer = make_trainer(load_base(base_dir)[0], tokenizer, rows, [], [], arm, scratch, progress=False)
            waste, batches = padding_waste(trainer)
            print(f"packing={packing}: {args.steps} steps ...", flush=True)
            trainer.train()
            end = trainer.state.log_history[-1]
            results[packing] = (waste, batches, end["num_input_tokens_seen"] / end["train_runtime"],
                                end["train_runtime"] / args.steps)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    lines = ["", (f"## Cold-start SFT: tokens/s and padding waste, packing vs padding "
                  f"({time.strftime('%Y-%m-%d')}, {machine()})"), "",
             (f"`python -m bench.bench_sft throughput`: {len(rows)} trajectories of `{', '.join(args.data)}` "
              f"(tokens: min {lengths[0]}, median {lengths[len(lengths) // 2]}, max {lengths[-1]}), base "
              f"`{args.base}`, profile `{args.profile}` (batch {params.per_device_train_batch_size}, max_length "
              f"{params.max_length}, {params.train_sampling_strategy} batches without packing), {args.steps} steps "
              f"per arm, one after the other in one process; load average at the end {os.getloadavg()[0]:.1f}."), "",
             "| arm | batches per epoch | padding waste | trained-on tokens/s | s/step |", "|---|---|---|---|---|"]
    for packing, (waste, batches, per_s, step_s) in results.items():
        name = "packing (bfd, padding-free)" if packing else "padding"
        lines.append(f"| {name} | {batches} | {waste:.1%} | {per_s:,.0f} | {step_s:.2f} |")
    ratio = results[True][2] / results[False][2]
    lines += ["", f"Packing / padding trained-on tokens per second: **{ratio:.2f}x**.", ""]
    report(lines, record=not args.no_record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("learning", "curve", "throughput"):
        p = sub.add_parser(name)
        p.add_argument("--data-dir", default=None, help="data root (default $GYMFORGE_DATA, else ./data)")
        p.add_argument("--base", default="tiny_policy", help="model artifact key or stage, or a transformers dir")
        p.add_argument("--data", nargs="+", default=["sft_set", "small_envs"], help="trajectory artifacts")
        p.add_argument("--profile", default="tiny", help="the profile whose sft section configures training")
        p.add_argument("--max-heldout", type=int, default=64)
        p.add_argument("--no-record", action="store_true")
    for learn in (sub.choices["learning"], sub.choices["curve"]):
        learn.add_argument("--max-steps", type=int, default=None, help="override the profile's max_steps")
        learn.add_argument("--k", type=int, default=4, help="free episodes per held-out task")
        learn.add_argument("--max-tokens", type=int, default=96, help="tokens per turn")
        learn.add_argument("--max-turns", type=int, default=4)
        learn.add_argument("--concurrency", type=int, default=16)
    curves = sub.choices["curve"]
    curves.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="training-set sizes")
    curves.add_argument("--eval-every", type=int, default=100, help="steps between held-out evaluations")
    curves.add_argument("--heldout-from", default="small_envs", help="the trajectory stage whose held-out tasks' "
                        "turns are scored (small_envs also plays free episodes)")
    curves.add_argument("--figure", default=str(Path(__file__).parent / "figures" / "sft-curve.png"))
    sub.choices["throughput"].add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    from inference.cpu import tune_allocator

    tune_allocator()
    {"learning": learning, "curve": curve, "throughput": throughput}[args.command](args)


if __name__ == "__main__":
    main()

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
(the first N training trajectories in a seeded order), one run of ``--max-steps`` steps (the profile's sft config,
``--set name=value`` on top; ``--init SIZE`` a fresh model instead of the base's weights) evaluated at step 0 and every
``--eval-every`` steps on each held-out set of ``--heldout-from``: ``small_envs`` (held-out tasks' golden replays),
``eval_random_envs`` (Random Complex Tasks in the small view: golden replays), ``random_envs_episodes`` (tasks
synthesized as midtrain_env's on the Random Complex Tasks' environments), ``midtrain_env`` (held-out tasks' rows).
Per set: the held-out loss of the trained turns, parsable / valid / exact call rates teacher-forced (intervals
resample tasks) with why the other turns miss (the model asks the user, writes no call, calls another tool, or
the right one with arguments its schema refuses), and at ``--play-at`` steps and the last the task success of
``--k`` free episodes per task (tasks that change the database); training wall and CPU minutes exclude the
evaluations. A table and a PNG (a panel per set, a line per size). ``--keep DIR`` saves the last run's trained
model there, for ``--base`` of a later bench.

``throughput``: the same training rows and batches for ``--steps`` steps in each ``--arm`` (sft settings on top of
the profile's, and where the output layer is applied), side by side in one process: trained-on tokens per second
(non-padding input tokens / step time, the first step set apart), seconds per step, padding waste (pad positions /
all positions over one epoch of the trainer's own batches) and each arm's ratio to the first.

    .venv/bin/python -m bench.bench_sft learning [--data-dir DIR] [--base tiny_policy] [--max-steps N] [--no-record]
    .venv/bin/python -m bench.bench_sft curve [--data small_envs] [--sizes 64 256 1024] [--max-steps 600]
        [--heldout-from midtrain_env eval_random_envs small_envs] [--set learning_rate=3e-3] [--init 256:4]
    .venv/bin/python -m bench.bench_sft throughput [--data-dir DIR] [--steps 10] --arm 'lora=null head=all' --arm ''
    .venv/bin/python -m bench.bench_sft scoring [--heldout-from midtrain_env] [--max-tokens 128]

``scoring``: the teacher-forced held-out scoring of the base (or ``--trained``) decoded three ways, one after the
other in one process: every prompt prefilled whole and decoded to ``--max-tokens`` (as before), the engine's kept
prefix with decoding stopped at the first call's end, and that in bfloat16: turns per second, the figures, and how
many turns score as with the first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads (RESULTS.md, inference)

from bench import report
from bench.bench_rl import heldout, machine
from inference.plotting import save_figure

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
    for setting in getattr(args, "set", None) or []:  # --set name=value, the value read as YAML (numbers, booleans)
        import yaml

        name, _, value = setting.partition("=")
        overrides[name.strip()] = yaml.safe_load(value)
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


@dataclass
class HeldOut:
    """One held-out set: the tool-calling turns scored teacher-forced, grouped by task (for intervals over tasks),
    and the tasks played as free episodes (none where the rows carry no environment to play)."""

    name: str
    turns: list[Any]
    groups: list[str]  # the task of each turn
    tasks: list[Any]
    rows: list[dict]  # the held-out conversations (trajectory records), whose trained turns' loss is measured


def held_out_sets(args: argparse.Namespace, tasks: Sequence[Any]) -> list[HeldOut]:
    """The held-out sets of ``--heldout-from``: ``small_envs`` (golden replays of held-out tasks, played in their
    small environments), ``eval_random_envs`` (Random Complex Tasks: unseen domains and renamed variants, each as the
    small view every reader offers, ``--small-tools`` distractors, compact schemas; golden replays in that view),
    or any trajectory stage whose rows re-verify by execution (``midtrain_env``: up to ``--max-heldout`` held-out
    tasks, each row a task played in its own database)."""
    sets = []
    for stage in args.heldout_from:
        if stage == "eval_random_envs":
            sets.append(random_envs_set(args))
            continue
        if stage == "random_envs_episodes":
            sets.append(random_envs_episodes(args))
            continue
        ids = [t.task_id for t in tasks] if stage == "small_envs" else None
        rows = held_out_frame(args.data_dir, stage, ids, args.max_heldout).to_dicts()
        played = tasks if stage == "small_envs" else [row_task(row) for row in rows if writes(row)]
        turns, groups = [], []
        for row in rows:
            found = call_turns([row], limit=1 << 30)
            turns += found
            groups += [row["task_id"]] * len(found)
        sets.append(HeldOut(stage, turns, groups, list(played), rows))
    return sets


def call_turns(rows: Sequence[dict], limit: int) -> list[Any]:
    from training.sft_eval import call_turns as turns_of

    return turns_of(rows, limit)


def writes(row: dict) -> bool:
    """A row that re-verifies by execution and whose task changes the database: a task that expects nothing
    written (a refusal) is solved by doing nothing, so it says nothing about what a policy learned."""
    import json

    if row["verifier"] != "execution":
        return False
    rubric = json.loads(json.loads(row["verify_input"])["task"]["rubric"])
    return any(any(table.values()) for table in (rubric.get("expected_diff") or {}).values())


def row_task(row: dict) -> Any:
    """A trajectory row that re-verifies by execution as an RL task: its own database, the tools it offered."""
    import json

    from training.async_rl.scheduling import RLTask

    verify = json.loads(row["verify_input"])
    tools = json.loads(row["tools"])
    env = {**verify["env"], "db": row["env_db"], "tools": tools, "tool_names": [t["function"]["name"] for t in tools]}
    return RLTask(f"{row['id']}", "env", row["domain"], {"env": env, "task": verify["task"]})


def random_envs_set(args: argparse.Namespace) -> HeldOut:
    """Random Complex Tasks in the small view (``envgen.small.task_view``), up to ``--max-heldout`` of them in a
    stable order; their golden replays give the teacher-forced turns."""
    import json

    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from envgen.environment import Environment, replay
    from flows.train import published
    from training.async_rl.sources import load_tasks

    root = data_root(args.data_dir)
    artifact = published(Catalog(root), open_store(root), args.random_envs)
    tasks = sorted(load_tasks({"eval_random_envs": artifact}, args.small_tools), key=lambda t: t.task_id)
    tasks = tasks[: args.max_heldout]
    turns, groups, rows = [], [], []
    for task in tasks:
        runtime = Environment(task.payload["env"])
        try:
            score = replay(runtime, task.payload["task"])
            tools = runtime.schemas
        finally:
            runtime.close()
        messages = [dict(m) for m in score.messages]
        row = {"id": task.task_id, "messages": json.dumps(messages), "tools": json.dumps(tools),
               "train": [m["role"] == "assistant" for m in messages]}
        rows.append(row)
        found = call_turns([row], limit=1 << 30)
        turns += found
        groups += [task.task_id] * len(found)
    return HeldOut("eval_random_envs", turns, groups, tasks, rows)


def random_envs_episodes(args: argparse.Namespace) -> HeldOut:
    """``random_envs_episodes``: tasks of the Random Complex Tasks' environments (unseen domains, renamed variants)
    synthesized and played as ``midtrain_env`` synthesizes its own (one acting customer, identified first, reasons
    before each call, what the user did not state asked for), in the small view: the held-out domains in the habits
    the training data teaches. Up to ``--max-heldout`` tasks that change the database, one per environment."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from flows.train import published
    from tasks.midtrain.midtrain_env import MidtrainEnvParams, plan_items
    from tasks.midtrain.trajectory_stages import episode_rows, open_teacher, token_counter

    root = data_root(args.data_dir)
    store, catalog = open_store(root), Catalog(root)
    envs = published(catalog, store, args.random_envs).read("environments").sort("env_id").to_dicts()
    # The routes refuse evaluation environments (``rct-`` ids) and held-out domains so that no training row comes
    # from them; here they are the evaluation, so they are renamed out of that guard and no domain is held out.
    envs = [{**env, "env_id": "heldout-" + env["env_id"].removeprefix("rct-")} for env in envs]
    params = MidtrainEnvParams(n_tasks=len(envs), variants_per_task=1, refusal_share=0.0, retry_prob=0.0,
                               heldout=(), distractor_tools=args.small_tools, max_tokens=4096)
    items, _ = plan_items(envs, params, "heldout")
    tokenizer = {"tokenizer": published(catalog, store, "tokenizer")}
    teacher = open_teacher(params)
    try:
        rows, _ = episode_rows(items, params, "random_envs_episodes", token_counter(params, tokenizer), teacher)
    finally:
        teacher.close()
    rows = [row for row in rows if writes(row)][: args.max_heldout]
    turns, groups = [], []
    for row in rows:
        found = call_turns([row], limit=1 << 30)
        turns += found
        groups += [row["task_id"]] * len(found)
    return HeldOut("random_envs_episodes", turns, groups, [row_task(row) for row in rows], rows)


def rate_ci(flags: Sequence[bool], groups: Sequence[str]) -> Any:
    """The rate of ``flags`` with a percentile bootstrap interval resampling whole tasks (turns of one task are not
    independent)."""
    from inference.metrics import bootstrap_ci

    per: dict[str, list[int]] = {}
    for flag, group in zip(flags, groups, strict=True):
        per.setdefault(group, [0, 0])
        per[group][0] += int(flag)
        per[group][1] += 1
    return bootstrap_ci(list(per.values()), lambda xs: sum(x[0] for x in xs) / max(sum(x[1] for x in xs), 1),
                        resamples=2_000)


def heldout_loss(model: Any, tokenizer: Any, rows: Sequence[dict]) -> float:
    """Mean loss per trained token of the held-out conversations (their assistant turns, as SFT trains them)."""
    import torch

    from training.sft_data import encode

    total = count = 0.0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for row in rows:
                example = encode(row, tokenizer)
                ids = torch.tensor([example.input_ids])
                labels = torch.tensor([[t if m else -100 for t, m in zip(example.input_ids, example.assistant_masks,
                                                                          strict=True)]])
                n = sum(example.assistant_masks[1:])
                total += float(model(input_ids=ids, labels=labels).loss) * n
                count += n
    finally:
        model.train(was_training)
    return total / max(count, 1)


def score_sets(model: Any, tokenizer: Any, sets: Sequence[HeldOut],
               max_new_tokens: int) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """Per held-out set: the three teacher-forced figures with intervals over tasks and the held-out loss, and what
    the model wrote at each turn (``--show`` prints from it instead of generating again)."""
    from training.sft_eval import FIGURES, greedy_texts, score_call

    out, written = {}, {}
    for held in sets:
        written[held.name] = greedy_texts(model, tokenizer, held.turns, max_new_tokens)
        pairs = list(zip(written[held.name], held.turns, strict=True))
        scores = [score_call(text, turn) for text, turn in pairs]
        out[held.name] = {name: rate_ci([s[name] for s in scores], held.groups) for name in FIGURES}
        out[held.name]["loss"] = heldout_loss(model, tokenizer, held.rows)
        out[held.name]["misses"] = Counter(miss(text, turn) for (text, turn), score in zip(pairs, scores, strict=True)
                                           if not score["tool_call_valid"])
    return out, written


MISSES = ("asks", "no call", "other tool", "bad arguments")


def miss(text: str, turn: Any) -> str:
    """Why a held-out turn's completion that is not a valid call misses: it asks the user a question instead of
    calling, writes no call otherwise, calls another tool than the trajectory did, or the right tool with arguments
    its schema refuses."""
    from inference.tokenizer import parse_tool_calls

    calls = parse_tool_calls(text)
    if not calls:
        return "asks" if text.rstrip().endswith("?") else "no call"
    return "other tool" if calls[0]["name"] != turn.name else "bad arguments"


def play_sets(model: Any, tokenizer: Any, sets: Sequence[HeldOut], args: argparse.Namespace) -> dict[str, Any]:
    """Per held-out set with tasks: ``--k`` free episodes per task; the success rate (reward 1) over episodes with
    an interval over tasks."""
    from inference.checkpoint import save_model
    from inference.engine_factory import load_engine
    from inference.metrics import bootstrap_ci
    from training.adapters import merged_copy
    from training.async_rl.config import RLConfig
    from training.async_rl.controllers import score_tasks

    played = [held for held in sets if held.tasks]
    if not played or not args.k:
        return {}
    scratch = Path(tempfile.mkdtemp(prefix="bench-sft-play-"))
    try:
        save_model(merged_copy(model), tokenizer, scratch, {"method": "sft"})
        engine = load_engine(f"hf:{scratch}")
        config = RLConfig(concurrency=args.concurrency, seed=0,
                          sampling={"max_tokens": args.max_tokens, "max_turns": args.max_turns})
        out = {}
        for held in played:
            rewards = score_tasks(engine, held.tasks, args.k, config)
            out[held.name] = bootstrap_ci([sum(r == 1.0 for r in v) / len(v) for v in rewards.values()],
                                          resamples=2_000)
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def curve(args: argparse.Namespace) -> None:
    import random
    import resource

    import polars as pl
    from transformers import TrainerCallback

    from inference.checkpoint import save_model
    from training.adapters import merge_adapter
    from training.sft import load_base, make_trainer

    base_dir, params, tasks, frame = resolve(args)
    sets = held_out_sets(args, tasks)
    held_ids = {g for held in sets for g in held.groups} | {t.task_id for held in sets for t in held.tasks}
    frame = frame.filter(~pl.col("task_id").is_in(sorted(held_ids)).fill_null(False))
    tokenizer = load_base(base_dir)[1]
    rows, rejected = rows_of(frame, tokenizer, params.max_length)
    random.Random(0).shuffle(rows)
    if args.all_tokens:  # the loss on every token of the conversation, not only the assistant turns
        rows = [{**row, "assistant_masks": [1] * len(row["input_ids"])} for row in rows]
    arm = params.model_copy(update={"max_steps": args.max_steps, "save_steps": 10 * args.max_steps})
    steps_at = set(range(args.eval_every, args.max_steps + 1, args.eval_every)) | {args.max_steps}
    play_at = set(args.play_at or []) | {args.max_steps}

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    class Measure(TrainerCallback):
        """Scores the held-out sets at step 0 and every ``--eval-every`` steps (free episodes at ``--play-at``),
        with the training time (wall and CPU) spent up to that step, evaluation excluded."""

        def __init__(self, trainer_model: Any) -> None:
            self.model, self.points, self.train_wall, self.train_cpu = trainer_model, [], 0.0, 0.0
            self.mark = (time.perf_counter(), cpu())

        def measure(self, step: int, play: bool) -> None:
            wall, used = self.mark
            self.train_wall += time.perf_counter() - wall
            self.train_cpu += cpu() - used
            figures, written = score_sets(self.model, tokenizer, sets, args.max_tokens)
            success = play_sets(self.model, tokenizer, sets, args) if play else {}
            for held in sets:
                for turn, text in zip(held.turns[: args.show], written[held.name], strict=False):
                    print(f"    {held.name} wants {turn.name}: {text!r}")
            self.points.append((step, self.train_wall, self.train_cpu, figures, success))
            line = "; ".join(f"{name} loss {f['loss']:.3f} format {f['tool_call_format'].value:.3f} valid "
                             f"{f['tool_call_valid'].value:.3f}"
                             f" exact {f['tool_call_exact'].value:.3f} misses {misses_cell(f['misses'])}"
                             + (f" success {success[name].value:.3f}" if name in success else "")
                             for name, f in figures.items())
            print(f"  step {step} ({self.train_wall / 60:.1f} min training): {line}", flush=True)
            self.mark = (time.perf_counter(), cpu())

        def on_train_begin(self, args_: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.mark = (time.perf_counter(), cpu())
            self.measure(0, bool(args.play_at and 0 in args.play_at))

        def on_step_end(self, args_: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step in steps_at:
                self.measure(state.global_step, state.global_step in play_at)

    started = time.perf_counter()
    results: dict[int, Measure] = {}
    trained_tokens: dict[int, float] = {}
    sizes = [n for n in args.sizes if n <= len(rows)] or [len(rows)]
    for size in sizes:
        scratch = Path(tempfile.mkdtemp(prefix="bench-sft-curve-"))
        try:
            print(f"size {size}: {args.max_steps} steps, held-out every {args.eval_every} ...", flush=True)
            fresh = fresh_model(args.init, tokenizer) if args.init else load_base(base_dir)[0]
            trainer = make_trainer(fresh, tokenizer, rows[:size], [], [], arm, scratch / "trainer", progress=False)
            results[size] = measure = Measure(trainer.model)
            trainer.add_callback(measure)
            trainer.train()
            trained_tokens[size] = trainer.state.num_input_tokens_seen
            if args.keep and size == sizes[-1]:
                save_model(merge_adapter(trainer.model), tokenizer, Path(args.keep),
                           {"method": "sft", "bench": "curve"})
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    record_curve(args, params, arm, rows, rejected, sets, results, trained_tokens, time.perf_counter() - started)


def fresh_model(size: str, tokenizer: Any) -> Any:
    """A freshly initialised model: a size of ``training/tiny_model.py``, or ``HIDDEN:LAYERS`` (heads of 32
    dimensions, half as many key-value heads, an MLP three times as wide) to measure shapes between them."""
    from training import tiny_model

    if ":" in size:
        hidden, layers = (int(x) for x in size.split(":"))
        heads = max(hidden // 32, 1)
        tiny_model.SIZES[size] = {"hidden_size": hidden, "intermediate_size": 3 * hidden, "num_hidden_layers": layers,
                                  "num_attention_heads": heads, "num_key_value_heads": max(heads // 2, 1)}
    return tiny_model.build_model(size, tokenizer)


def record_curve(args: argparse.Namespace, params: Any, arm: Any, rows: Sequence[dict], rejected: Any,
                 sets: Sequence[HeldOut], results: dict[int, Any], trained_tokens: dict[int, float],
                 wall: float) -> None:
    from training.tiny_model import parameter_count

    lengths = sorted(len(r["input_ids"]) for r in rows)
    parameters = parameter_count(next(iter(results.values())).model)
    per_step = arm.per_device_train_batch_size * arm.gradient_accumulation_steps
    held = "; ".join(f"`{h.name}` {len(set(h.groups))} tasks, {len(h.turns)} turns"
                     + (f", {len(h.tasks)} played" if h.tasks else "") for h in sets)
    model_line = (f"a fresh `{args.init}` model" if args.init else f"base `{args.base}`") + f" ({parameters:,} parameters)"
    lines = ["", (f"## Cold-start SFT: learning curves on held-out environment tasks ({time.strftime('%Y-%m-%d')}, "
                  f"{machine()})"), "",
             (f"`python -m bench.bench_sft curve {' '.join(args.argv)}`: {model_line}, trained on "
              f"`{', '.join(args.data)}` (the first N of {len(rows)} trajectories in a seeded order, every row of a "
              f"held-out task removed, {rejected.height} over max_length {arm.max_length} set aside; tokens per "
              f"trajectory median {lengths[len(lengths) // 2]:,}, max {lengths[-1]:,}); profile `{args.profile}`'s "
              f"sft config{(' with ' + ', '.join(args.set)) if args.set else ''}: {args.max_steps} steps of "
              f"{per_step} trajectories ({arm.per_device_train_batch_size} x {arm.gradient_accumulation_steps} "
              f"accumulated), lr {arm.learning_rate:g} {arm.lr_scheduler_type}. Held out: {held}; teacher-forced "
              f"greedy turns of up to {args.max_tokens} tokens every {args.eval_every} steps, {args.k} free "
              f"episodes per played task (up to {args.max_turns} turns) at steps "
              f"{', '.join(map(str, sorted(set(args.play_at or []) | {args.max_steps})))}. Intervals: percentile "
              f"bootstrap 95% over tasks. Wall {wall / 60:.1f} min in all."), ""]
    names = [h.name for h in sets]
    header = ["trajectories", "step", "training min (wall / CPU)"]
    for name in names:
        header += [f"{name} loss", f"{name} parsable", f"{name} valid [95% CI]", f"{name} exact",
                   f"{name} misses ({' / '.join(MISSES)})"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for size, measure in results.items():
        for step, train_wall, train_cpu, figures, _ in measure.points:
            cells = [str(size), str(step), f"{train_wall / 60:.1f} / {train_cpu / 60:.1f}"]
            for name in names:
                f = figures[name]
                v = f["tool_call_valid"]
                cells += [f"{f['loss']:.2f}", f"{f['tool_call_format'].value:.3f}", f"{v.value:.3f} [{v.lo:.3f}, {v.hi:.3f}]",
                          f"{f['tool_call_exact'].value:.3f}", misses_cell(f["misses"])]
            lines.append("| " + " | ".join(cells) + " |")
    played = [(size, step, name, s) for size, m in results.items() for step, *_, success in m.points
              for name, s in success.items()]
    if played:
        lines += ["", "| trajectories | step | held-out set | task success (reward 1) [95% CI] |", "|---|---|---|---|"]
        lines += [f"| {size} | {step} | {name} | {s.value:.3f} [{s.lo:.3f}, {s.hi:.3f}] |"
                  for size, step, name, s in played]
    tokens = ", ".join(f"{size}: {trained_tokens[size] / 1e6:.2f}M" for size in results)
    lines += ["", f"Trained-on tokens by training-set size: {tokens}."]
    figure = plot_curve({size: [(p[0], p[3]) for p in m.points] for size, m in results.items()}, names,
                        Path(args.figure))
    lines += ["", f"![held-out call validity against steps]({os.path.relpath(figure, Path(__file__).parent)})", ""]
    report(lines, record=not args.no_record)


def misses_cell(misses: Counter) -> str:
    return " / ".join(str(misses[kind]) for kind in MISSES)


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


def plot_curve(points: dict[int, list[tuple[int, dict]]], names: Sequence[str], path: Path) -> Path:
    """Valid (solid) and parsable (dashed) call rates against steps: one panel per held-out set, a line per size."""
    with save_figure(path, 1, len(names), figsize=(5 * len(names), 3.5), squeeze=False) as (_, axes):
        for ax, name in zip(axes[0], names, strict=True):
            for size, curve_points in points.items():
                steps = [p[0] for p in curve_points]
                [line] = ax.plot(steps, [p[1][name]["tool_call_valid"].value for p in curve_points], marker="o",
                                 label=f"valid, {size} traj.")
                ax.plot(steps, [p[1][name]["tool_call_format"].value for p in curve_points], marker="s",
                        linestyle="--", color=line.get_color(), label=f"parsable, {size} traj.")
            ax.set_title(f"held out: {name}")
            ax.set_xlabel("SFT step")
            ax.set_ylabel("rate (teacher-forced turns)")
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize="small")
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


def arm_settings(arm: str) -> tuple[dict[str, Any], bool]:
    """``(sft config overrides, output layer at trained positions only)`` of an ``--arm``: space-separated
    name=value settings (dotted names nest: ``lora.layers=4``; ``lora=null`` trains every weight) and ``head=all``
    for the output layer at every position (TRL's CPU path before ``trained_positions_only``)."""
    from flows.cli.train import parse_settings

    settings = parse_settings(arm.split())
    head = settings.pop("head", "trained")
    if head not in ("all", "trained"):
        raise SystemExit(f"--arm {arm!r}: head is all or trained")
    return settings, head == "trained"


def throughput(args: argparse.Namespace) -> None:
    from transformers import TrainerCallback

    from flows.profiles import deep_update
    from training.sft import SFTParams, load_base, make_trainer

    base_dir, params, _, frame = resolve(args)
    tokenizer = load_base(base_dir)[1]
    rows, _ = rows_of(frame, tokenizer, params.max_length)
    if args.rows:  # the rows nearest the median length, trained for several epochs (kept frozen outputs serve those)
        middle = sorted(len(r["input_ids"]) for r in rows)[len(rows) // 2]
        rows = sorted(rows, key=lambda r: abs(len(r["input_ids"]) - middle))[: args.rows]
    lengths = sorted(len(r["input_ids"]) for r in rows)
    trained = sorted(sum(r["assistant_masks"]) / len(r["input_ids"]) for r in rows)

    class StepTimes(TrainerCallback):
        """Wall seconds and trained-on tokens of each step (the first, which warms the allocator, set apart)."""

        def __init__(self) -> None:
            self.steps: list[tuple[float, int]] = []
            self.mark = (0.0, 0)

        def on_step_begin(self, args_: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.mark = (time.perf_counter(), state.num_input_tokens_seen)

        def on_step_end(self, args_: Any, state: Any, control: Any, **kwargs: Any) -> None:
            started, tokens = self.mark
            self.steps.append((time.perf_counter() - started, state.num_input_tokens_seen - tokens))

    results = {}
    for arm in args.arm:
        overrides, head_trained = arm_settings(arm)
        config = SFTParams.model_validate(deep_update(params.model_dump(), {
            **overrides, "max_steps": args.steps + 1, "save_steps": 10 * args.steps}))
        scratch = Path(tempfile.mkdtemp(prefix="bench-sft-tp-"))
        try:
            trainer = make_trainer(load_base(base_dir)[0], tokenizer, rows, [], [], config, scratch, progress=False)
            trainer.head_at_trained_positions = head_trained
            waste, batches = padding_waste(trainer)
            times = StepTimes()
            trainer.add_callback(times)
            print(f"{arm or '(profile)'}: {args.steps} + 1 steps ...", flush=True)
            trainer.train()
            timed = times.steps[1:]
            seconds, tokens = sum(t for t, _ in timed), sum(n for _, n in timed)
            results[arm] = (waste, batches, tokens / seconds, seconds / len(timed), os.getloadavg()[0])
            print(f"  {tokens / seconds:,.0f} tokens/s, {seconds / len(timed):.2f} s/step", flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    per_step = params.per_device_train_batch_size * params.gradient_accumulation_steps
    epochs = f"; an epoch is {-(-len(rows) // per_step)} step(s)" if args.rows else ""
    lines = ["", (f"## Cold-start SFT: step cost side by side ({time.strftime('%Y-%m-%d')}, {machine()})"), "",
             (f"`python -m bench.bench_sft throughput {' '.join(args.argv)}`: {len(rows)} trajectories of "
              f"`{', '.join(args.data)}` (tokens: min {lengths[0]}, median {lengths[len(lengths) // 2]}, max "
              f"{lengths[-1]}; trained share of the positions: median {trained[len(trained) // 2]:.0%}), base "
              f"`{args.base}`, profile `{args.profile}` (batch {params.per_device_train_batch_size} x "
              f"{params.gradient_accumulation_steps}, max_length {params.max_length}, "
              f"{params.train_sampling_strategy} batches), each arm its settings on top of the profile's, "
              f"{args.steps} steps timed after a first one, the same batches in every arm, the arms one after the "
              f"other in one process{epochs}."), "",
             "| arm | padding waste | trained-on tokens/s | s/step | load average after | vs the first arm |",
             "|---|---|---|---|---|---|"]
    first = next(iter(results.values()))[2]
    for arm, (waste, _, per_s, step_s, load) in results.items():
        lines.append(f"| `{arm or '(profile)'}` | {waste:.1%} | {per_s:,.0f} | {step_s:.2f} | {load:.1f} | "
                     f"{per_s / first:.2f}x |")
    lines.append("")
    report(lines, record=not args.no_record)


DECODING = {"one at a time, whole prompts, to max tokens": {"prefix_cache": False, "first_call": False,
                                                             "batch_size": 1},
            "batches of 8, prompts apart on the kept prefix, to the first call's end": {},
            "the same in bfloat16": {"dtype": "bfloat16"}}
"""The held-out decoding before and after: one turn at a time, each prompt prefilled whole and decoded to the token
limit, against the defaults now (training/sft_eval.py ``greedy_texts``), in float32 and in bfloat16."""


def scoring(args: argparse.Namespace) -> None:
    from training.sft import load_base
    from training.sft_eval import score_turns

    base_dir, _, tasks, _ = resolve(args)
    model, tokenizer = load_base(base_dir)[:2]
    if args.trained:  # a trained model of the same tokenizer (bench_sft curve --keep): it stops at its calls
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.trained, local_files_only=True)
    turns = [turn for held in held_out_sets(args, tasks) for turn in held.turns]
    results = {}
    for name, decoding in DECODING.items():
        started = time.perf_counter()
        scores = score_turns(model, tokenizer, turns, max_new_tokens=args.max_tokens, **decoding)
        results[name] = (time.perf_counter() - started, scores)
        print(f"  {name}: {len(turns) / results[name][0]:.3f} turns/s", flush=True)
    first_wall, first = next(iter(results.values()))
    lines = ["", (f"## Held-out tool-call scoring: decoding paths side by side (bench_sft.py scoring, "
                  f"{time.strftime('%Y-%m-%d')}, {machine()})"), "",
             (f"`python -m bench.bench_sft scoring {' '.join(args.argv)}`: "
              f"{'model ' + args.trained if args.trained else 'base ' + repr(args.base)}, {len(turns)} held-out "
              f"turns of {', '.join(args.heldout_from)} ({len({t.trajectory for t in turns})} trajectories), greedy, "
              f"up to {args.max_tokens} tokens each, the paths one after the other in one process; load average "
              f"at the end {os.getloadavg()[0]:.1f}."), "",
             "| decoding | wall s | turns/s | vs the first | parsable | valid | exact | turns scored as the first |",
             "|---|---|---|---|---|---|---|---|"]
    for name, (wall, scores) in results.items():
        rates = [sum(s[f] for s in scores) / len(scores) for f in ("tool_call_format", "tool_call_valid",
                                                                   "tool_call_exact")]
        same = sum(a == b for a, b in zip(first, scores, strict=True))
        lines.append(f"| {name} | {wall:.1f} | {len(turns) / wall:.3f} | {first_wall / wall:.2f}x | "
                     + " | ".join(f"{r:.3f}" for r in rates) + f" | {same} of {len(turns)} |")
    lines.append("")
    report(lines, record=not args.no_record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("learning", "curve", "throughput", "scoring"):
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
    curves, scored = sub.choices["curve"], sub.choices["scoring"]
    scored.add_argument("--max-tokens", type=int, default=128, help="tokens per turn")
    scored.add_argument("--trained", default=None, help="score this transformers directory (a trained model of the "
                        "base's tokenizer, bench_sft curve --keep) instead of the base")
    curves.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="training-set sizes")
    curves.add_argument("--eval-every", type=int, default=100, help="steps between held-out evaluations")
    for held in (curves, scored):
        held.add_argument("--heldout-from", nargs="+", default=["small_envs"], help="held-out sets: small_envs, "
                          "eval_random_envs (Random Complex Tasks in the small view), random_envs_episodes (their "
                          "environments played in the training data's habits) or a trajectory stage whose rows "
                          "re-verify by execution (midtrain_env); each is scored teacher-forced and played")
        held.add_argument("--random-envs", default="eval_random_envs", help="the Random Complex Tasks artifact: "
                          "the stage's name or, where several are published, a key")
        held.add_argument("--small-tools", type=int, default=3, help="distractors beside a Random Complex Task's "
                          "own tools (compact schemas), as the tiny profile's RL and evaluation offer them")
    curves.add_argument("--set", action="append", default=[], help="an sft config field of the run, name=value "
                        "(repeatable), on top of the profile's")
    curves.add_argument("--init", default=None, help="train a freshly initialised model of this size "
                        "(training/tiny_model.py) with the base's tokenizer instead of the base's weights")
    curves.add_argument("--all-tokens", action="store_true", help="train on every token of the conversations "
                        "(prompts, tool schemas and results too), not only the trained assistant turns")
    curves.add_argument("--show", type=int, default=0, help="print what the model writes at this many turns of "
                        "each held-out set at every evaluation")
    curves.add_argument("--play-at", type=int, nargs="*", default=[], help="steps at which the held-out tasks are "
                        "also played as free episodes (always at the last step)")
    curves.add_argument("--keep", default=None, help="save the last training-set size's trained model in this "
                        "directory (a transformers directory: --base takes it)")
    curves.add_argument("--figure", default=str(Path(__file__).parent / "figures" / "sft-curve.png"))
    sub.choices["throughput"].add_argument("--steps", type=int, default=10)
    sub.choices["throughput"].add_argument("--rows", type=int, default=0, help="train on this many rows (those "
                                           "nearest the median length) for as many epochs as the steps take; 0: all")
    sub.choices["throughput"].add_argument("--arm", action="append", required=True, help="an arm: space-separated "
                                           "sft settings on top of the profile's (lora=null, lora.layers=4, "
                                           "bf16=false) and head=all|trained (the output layer's positions); "
                                           "repeatable, the first is the reference of the ratios")
    args = parser.parse_args()
    args.argv = sys.argv[2:]
    from inference.cpu import tune_allocator

    tune_allocator()
    {"learning": learning, "curve": curve, "throughput": throughput, "scoring": scoring}[args.command](args)


if __name__ == "__main__":
    main()

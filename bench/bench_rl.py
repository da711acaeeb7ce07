"""Asynchronous RL on 2 cores: streaming rollouts against the synchronous baseline, and whether RL teaches.

``throughput``: the same RL run (the tiny profile's small environments, a real policy in two controller processes,
real training steps) twice, side by side: asynchronous with ``max_staleness`` 2 and the synchronous baseline (a
barrier per step), every environment step taking a lognormal time (median ``--median`` s, sigma ``--sigma``: p99 /
median = exp(2.326 sigma), 26x at 1.4), as remote tools and a user simulator would. Figures: consumed samples per
second (the samples steps were taken on, equal-reward groups included) and trained samples per second, the engines'
request load ratio (engine-busy time over wall time), the staleness histogram of the consumed samples, and reward
against trained samples (asynchrony must not cost learning), plotted with throughput over time to
``bench/figures/rl_async_vs_sync.png``.

``latency``: the orchestration against its limit, with latency test doubles and no CPU contention: an engine whose
every call sleeps a lognormal wall time (p99 >= 20x median, as DORA's long tails), answering prompt tasks right with known probabilities, and a trainer whose step sleeps a fixed wall time.
Async at max_staleness 1 and 2 against the synchronous baseline, side by side in one run: trained samples/s, the
engines' busy share (engine-call time over wall time, per controller), and the manager's overhead per sample (time in
its collect / revive / admit / dispatch loop body, over the samples it handled).

``engines``: the same comparison with real engines on the CPU (the transformers engine in two controller processes,
a tiny model, real training steps): async against sync consumed samples/s (asynchrony must never cost throughput),
and the RL loop's generated tokens/s over the engine's own batched generation tokens/s for the same shapes (how
close the loop runs to its engine's limit).

``learning``: held-out reward before and after RL from a base model (an SFT checkpoint): the tasks split by a stable
hash of their ids (half trained on, half held out), ``--k`` samples per held-out task before and after ``--steps``
steps, and the mean per-task difference with a bootstrap 95% interval.

    .venv/bin/python -m bench.bench_rl throughput --data-dir DIR --base KEY [--steps 12] [--no-record]
    .venv/bin/python -m bench.bench_rl latency [--steps 30] [--median 0.2] [--sigma 1.4] [--step-s 0.1]
    .venv/bin/python -m bench.bench_rl engines [--steps 60]
    .venv/bin/python -m bench.bench_rl learning --data-dir DIR --base KEY --tasks small_envs keychain [--steps 40]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads (RESULTS.md, inference)

from bench import report

FIGURES = Path(__file__).with_name("figures")


# --- a remote tool service: lognormal latency ----------------------------------------------------------------------


class SlowTools:
    """An environment whose every step (a tool call or the simulated user's reply) takes a lognormal time, awaited so
    the controller's other episodes run meanwhile (tools and user simulator behind a network, not local SQL)."""

    def __init__(self, record: Mapping[str, Any], median_s: float, sigma: float) -> None:
        from envgen.noise.environment import NoisyEnvironment

        self.env = NoisyEnvironment(dict(record))
        self.median_s, self.sigma = median_s, sigma
        self.rng = random.Random(str(record.get("env_id")))

    async def areset(self, task: Any) -> Any:
        return await self.env.areset(task)

    async def astep(self, message: Mapping[str, Any]) -> Any:
        await asyncio.sleep(self.median_s * self.rng.lognormvariate(0.0, self.sigma))
        return await self.env.astep(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


@dataclass(frozen=True)
class SlowToolsFactory:
    median_s: float
    sigma: float

    def __call__(self, record: Mapping[str, Any]) -> SlowTools:
        return SlowTools(record, self.median_s, self.sigma)


# --- inputs ----------------------------------------------------------------------------------------------------------


def resolve(data_dir: str, base: str, task_refs: Sequence[str]) -> tuple[Path, list[Any]]:
    """The base model's directory and the RL tasks of the named artifacts (keys or stage names)."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from flows.train import published
    from training.async_rl.sources import load_tasks

    store, catalog = open_store(data_dir), Catalog(data_dir)
    base_path = Path(base)
    model_dir = base_path if base_path.is_dir() else Path(published(catalog, store, base).directory)
    inputs = {}
    for ref in task_refs:
        artifact = published(catalog, store, ref)
        inputs[artifact.stage] = artifact
    return model_dir, load_tasks(inputs)


def machine() -> str:
    """The machine and how busy it was (the 15-minute load average: other work shares the cores)."""
    return (f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[2]:.1f}")


# --- throughput --------------------------------------------------------------------------------------------------


def run_arm(model_dir: Path, tasks: Sequence[Any], config: Any, median_s: float, sigma: float) -> Any:
    from training.async_rl.run import RLRun

    run_dir = Path(tempfile.mkdtemp(prefix="bench-rl-"))
    try:
        rl = RLRun(model_dir, tasks, config, run_dir, make_env=SlowToolsFactory(median_s, sigma), resume=False)
        started = time.perf_counter()
        result = rl.run()
        return result, time.perf_counter() - started, rl.manager.engine_load()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def throughput(args: argparse.Namespace) -> None:
    from training.async_rl.config import RLConfig
    from training.async_rl.plot import plot_runs
    from training.async_rl.trainer import NO_GRADIENT

    model_dir, tasks = resolve(args.data_dir, args.base, args.tasks)
    tasks = [t for t in tasks if t.kind == "env"]
    if not tasks:
        raise SystemExit("no environment tasks among --tasks: name small_envs (or another environments artifact)")
    common = {"steps": args.steps, "batch_size": args.batch_size, "num_generations": args.group, "controllers": 2,
              "concurrency": args.concurrency, "checkpoint_every": args.steps, "seed": 0,
              "sampling": {"max_tokens": 48, "max_turns": 4}}
    arms = {"async": RLConfig(**common, mode="async", max_staleness=2),
            "sync": RLConfig(**common, mode="sync", max_staleness=0)}
    results = {}
    for name, config in arms.items():
        print(f"{name}: {config.steps} steps of {config.batch_size} samples ...", flush=True)
        results[name] = run_arm(model_dir, tasks, config, args.median, args.sigma)
    rng = random.Random(0)
    draws = sorted(args.median * rng.lognormvariate(0.0, args.sigma) for _ in range(100_000))
    p50, p99 = draws[len(draws) // 2], draws[int(len(draws) * 0.99)]
    lines = [
        "", f"## Asynchronous vs synchronous RL ({time.strftime('%Y-%m-%d')}, {machine()})", "",
        (f"`python -m bench.bench_rl throughput`: {len(tasks)} environment tasks of `{', '.join(args.tasks)}`, base "
        f"`{args.base}`, {args.steps} steps of {args.batch_size} samples (G = {args.group}), 2 controller processes "
        f"x {args.concurrency} samples in flight, environment-step latency lognormal (median {p50 * 1000:.0f} ms, p99 "
        f"{p99 * 1000:.0f} ms = {p99 / p50:.0f}x median). Asynchronous: max_staleness 2; synchronous: a barrier per "
        "step (max_staleness 0)."), "",
        ("| arm | wall s | generated | consumed samples/s | trained samples/s | engine load | staleness of consumed "
         "samples | stale drops | final reward (mean of last 3 steps) |"),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rates = {}
    for name, (result, wall, load) in results.items():
        samples = result.samples
        consumed = samples.filter(samples["trained"] | (samples["drop_reason"] == NO_GRADIENT))
        trained = samples.filter(samples["trained"])
        histogram = Counter(consumed["staleness"].to_list())
        stale = samples.filter(samples["drop_reason"] == "stale").height
        rewards = result.steps["reward_mean"].to_list()
        rates[name] = consumed.height / wall, trained.height / wall
        lines.append(f"| {name} | {wall:.0f} | {samples.height} | {rates[name][0]:.2f} | {rates[name][1]:.2f} | "
                     f"{load:.0%} | {dict(sorted(histogram.items()))} | {stale} | "
                     f"{sum(rewards[-3:]) / len(rewards[-3:]):.3f} |")
    # A consumed sample went into a step (equal-reward groups carry no gradient but are the same work to produce).
    ratio = rates["async"][0] / max(1e-9, rates["sync"][0])
    figure = plot_runs({name: (result.steps, result.samples) for name, (result, _, _) in results.items()},
                       FIGURES / "rl_async_vs_sync.png", "asynchronous vs synchronous RL")
    lines += ["", (f"Asynchronous / synchronous consumed samples per second: **{ratio:.2f}x**. Reward against trained "
              f"samples: `{figure.relative_to(Path(__file__).parent)}`."), ""]
    report(lines, record=not args.no_record)


# --- latency test doubles -------------------------------------------------------------------------------------------


class LatencyTestEngine:
    """Test double: each call sleeps one lognormal draw of wall time (no CPU), whatever its batch, and answers
    ``Question i`` right with probability ``p``; follows published versions without reading their weights."""

    max_concurrency = 64  # a server: its calls overlap, each returns when its own time is up

    def __init__(self, n_tasks: int, median_s: float, sigma: float, seed: int) -> None:
        from inference.testing import BernoulliTestEngine

        self.median_s, self.sigma = median_s, sigma
        self.rng = random.Random(seed)
        self.lock = threading.Lock()  # calls come from several threads
        self.policy_version = 0
        self.answers = BernoulliTestEngine({question(i): (0.5, f"city{i}") for i in range(n_tasks)}, exact=False)

    def load_weights(self, path: str, policy_version: int) -> None:
        self.policy_version = policy_version

    def generate(self, requests: Sequence[Any]) -> list[list[Any]]:
        from dataclasses import replace

        with self.lock:
            delay = self.median_s * self.rng.lognormvariate(0.0, self.sigma)
            version = self.policy_version
            answers = self.answers.generate(requests)
        time.sleep(delay)
        return [[replace(c, policy_version=version) for c in cs] for cs in answers]

    def close(self) -> None:
        pass


def question(i: int) -> str:
    return f"Question {i}: which city?"


def prompt_tasks(n: int) -> list[Any]:
    import json

    from training.async_rl.scheduling import RLTask

    return [RLTask(f"q{i}", "prompt", "qa", {"prompt": json.dumps([{"role": "user", "content": question(i)}]),
                                             "answer": f"city{i}", "aliases": [], "reward_fn": "two_way"})
            for i in range(n)]


class OwnEngines:
    """Controller threads, each with a fresh latency double (its own seed)."""

    def __init__(self, n_tasks: int, median_s: float, sigma: float) -> None:
        from training.async_rl.controllers import ThreadLauncher

        self.threads = ThreadLauncher()
        self.engine = lambda uid: LatencyTestEngine(n_tasks, median_s, sigma, seed=uid)

    def queue(self) -> Any:
        return self.threads.queue()

    def start(self, uid: int, spec: Any, inbox: Any, outbox: Any) -> Any:
        from dataclasses import replace

        return self.threads.start(uid, replace(spec, engine=self.engine(uid)), inbox, outbox)


def fixed_step(trainer: Any, step_s: float) -> Any:
    """The trainer double's step: ``step_s`` of wall time, every sample trained (advantage 1), the version advanced."""
    from training.async_rl.trainer import StepResult

    def step(groups: Sequence[Sequence[Any]], kinds: Mapping[str, str]) -> StepResult:
        time.sleep(step_s)
        trainer.version += 1
        samples = [s for group in groups for s in group]
        metrics = {"loss": 0.0, "kl": 0.0, "clip_ratio": 0.0, "ratio_mean": 1.0, "behaviour_weight_mean": 1.0,
                   "tokens": 0.0, "grad_norm": 0.0, "learning_rate": 0.0, "zero_variance_groups": 0.0,
                   "groups": float(len(groups)), "trained_samples": float(len(samples)), "ratio_on_policy": 1.0}
        return StepResult(metrics, {s.sample_id: 1.0 for s in samples})

    return step


def timed(manager: Any, spent: list[float]) -> None:
    """Accumulate the wall time of the manager's loop body into ``spent[0]``."""
    for name in ("_collect", "_revive", "admit", "_dispatch"):
        original = getattr(manager, name)

        def wrapper(*args: Any, _original: Any = original) -> Any:
            start = time.perf_counter()
            try:
                return _original(*args)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(manager, name, wrapper)


def tiny_model(directory: Path) -> Path:
    """A tiny transformers checkpoint (its trainer only publishes weights here)."""
    from inference.tokenizer import save, train_tokenizer
    from training.tiny_model import init_model

    rng = random.Random(0)
    words = ["city", "river", "which", "question", "answer", "north", "boxed", "founded", "the", "of"]
    texts = [" ".join(rng.choice(words) for _ in range(20)) + f" {i}." for i in range(300)]
    save(train_tokenizer(texts, vocab_size=512), directory / "tokenizer")
    return init_model("tiny", directory / "tokenizer", directory / "model", seed=0)


def latency(args: argparse.Namespace) -> None:
    from training.async_rl.config import RLConfig
    from training.async_rl.run import RLRun

    root = Path(tempfile.mkdtemp(prefix="bench-rl-latency-"))
    load_before = os.getloadavg()[0]
    try:
        model_dir = tiny_model(root)
        tasks = prompt_tasks(32)
        common = {"steps": args.steps, "batch_size": args.batch_size, "num_generations": args.group,
                  "controllers": args.controllers, "concurrency": args.concurrency, "checkpoint_every": args.steps,
                  "beta": 0.0, "seed": 0, "scheduling": {"hard_mining": False}}
        arms = {"sync": {"mode": "sync", "max_staleness": 0}, "async, max_staleness 1": {"max_staleness": 1},
                "async, max_staleness 2": {"max_staleness": 2}}
        rows = {}
        for name, arm in arms.items():
            config = RLConfig(**common, **arm)
            rl = RLRun(model_dir, tasks, config, root / name.replace(" ", "_").replace(",", ""),
                       engine=LatencyTestEngine(len(tasks), args.median, args.sigma, 99),
                       launcher=OwnEngines(len(tasks), args.median, args.sigma), resume=False)
            rl.trainer.step = fixed_step(rl.trainer, args.step_s)
            spent = [0.0]
            timed(rl.manager, spent)
            started = time.perf_counter()
            result = rl.run()
            wall = time.perf_counter() - started
            trained = int(result.samples["trained"].sum())
            rows[name] = (wall, trained / wall, rl.manager.engine_load(), spent[0] / max(1, rl.manager.admissions)
                          * 1e6, result.samples.height, int((result.samples["drop_reason"] == "stale").sum()),
                          result.samples.filter(result.samples["trained"])["staleness"].mean())
            print(f"{name}: {trained / wall:.1f} trained samples/s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(0)
    draws = sorted(args.median * rng.lognormvariate(0.0, args.sigma) for _ in range(100_000))
    p50, p99 = draws[len(draws) // 2], draws[int(len(draws) * 0.99)]
    sync_rate = rows["sync"][1]
    lines = [
        "", (f"## RL orchestration against its limit: latency test doubles ({time.strftime('%Y-%m-%d')}, {machine()}, "
             f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after)"), "",
        (f"`python -m bench.bench_rl latency`: {args.steps} steps of {args.batch_size} samples (G = {args.group}), "
         f"{args.controllers} controllers x {args.concurrency} samples in flight; an engine call sleeps a lognormal "
         f"draw (median {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms = {p99 / p50:.0f}x "
         f"median; no CPU), a trainer step sleeps {args.step_s:g} s. The manager's overhead is its loop body's time "
         "over the samples admitted."), "",
        ("| arm | wall s | trained samples/s | vs sync | engines' busy share | manager overhead per sample (µs) | "
         "generated | stale drops | staleness of trained (mean) |"),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (wall, rate, busy, overhead, generated, stale, staleness) in rows.items():
        lines.append(f"| {name} | {wall:.1f} | {rate:.1f} | {rate / sync_rate:.2f}x | {busy:.0%} | {overhead:.0f} | "
                     f"{generated} | {stale} | {staleness:.2f} |")
    lines.append("")
    report(lines, record=not args.no_record)


def engine_tokens_per_s(model_dir: Path, tasks: Sequence[Any], config: Any, rounds: int = 3) -> float:
    """The transformers engine's own batched generation: ``concurrency`` prompts of the tasks per call, the RL
    run's sampling settings, best of ``rounds`` calls after a warm-up."""
    import json

    from inference.engine import Request, SamplingParams
    from inference.hf_engine import HFEngine

    engine = HFEngine.load(model_dir, max_batch_size=config.concurrency)
    sampling = config.sampling
    requests = [Request(json.loads(task.payload["prompt"]), sampling=SamplingParams(
        sampling.temperature, sampling.top_p, sampling.max_tokens, seed=i)) for i, task in
        zip(range(config.concurrency), [*tasks] * config.concurrency, strict=False)]
    engine.generate(requests)
    best = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        tokens = sum(len(c.token_ids) for cs in engine.generate(requests) for c in cs)
        best = max(best, tokens / (time.perf_counter() - started))
    return best


def engines(args: argparse.Namespace) -> None:
    import polars as pl

    from training.async_rl.config import RLConfig
    from training.async_rl.run import RLRun
    from training.async_rl.trainer import NO_GRADIENT

    root = Path(tempfile.mkdtemp(prefix="bench-rl-engines-"))
    load_before = os.getloadavg()[0]
    try:
        model_dir = tiny_model(root)
        tasks = prompt_tasks(32)
        common = {"steps": args.steps, "batch_size": args.batch_size, "num_generations": args.group,
                  "controllers": 2, "concurrency": args.concurrency, "checkpoint_every": args.steps, "beta": 0.0,
                  "seed": 0, "learning_rate": 1e-4, "sampling": {"max_tokens": args.max_tokens},
                  "scheduling": {"hard_mining": False}}
        arms = {"sync": RLConfig(**common, mode="sync", max_staleness=0),
                "async, max_staleness 2": RLConfig(**common, max_staleness=2)}
        rows = {}
        for name, config in arms.items():
            rl = RLRun(model_dir, tasks, config, root / name.split(",")[0], resume=False)
            started = time.perf_counter()
            result = rl.run()
            wall = time.perf_counter() - started
            samples = result.samples
            consumed = samples.filter(samples["trained"] | (samples["drop_reason"] == NO_GRADIENT)).height
            # Steady state: from the first step to the last (the controllers' start-up, importing torch and
            # loading the model in each process, is not the loop's throughput).
            clock = result.steps["wall_s"]
            steady = (config.steps - 1) * config.batch_size / (clock[-1] - clock[0])
            late = samples.filter(pl.col("trainer_version") >= 1)
            rows[name] = (wall, steady, consumed / wall, int(late["n_output_tokens"].sum()) / (clock[-1] - clock[0]),
                          rl.manager.engine_load())
            print(f"{name}: {rows[name][1]:.2f} consumed samples/s", flush=True)
        limit = engine_tokens_per_s(model_dir, tasks, arms["sync"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = [
        "", (f"## RL with real engines on the CPU: async vs sync and the engine's limit ({time.strftime('%Y-%m-%d')}, "
             f"{machine()}, 1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after)"), "",
        (f"`python -m bench.bench_rl engines`: a tiny model (vocabulary 512), {len(tasks)} prompt tasks, {args.steps} "
         f"steps of {args.batch_size} samples (G = {args.group}), 2 controller processes (transformers engine) x "
         f"{args.concurrency} samples in flight, {args.max_tokens} tokens per answer, real training steps. The engine's "
         f"own batched generation: {args.concurrency} of the same prompts per call, the same sampling, in this "
         f"process: {limit:.0f} tokens/s. A consumed sample went into a step (the untrained tiny model rarely "
         "answers right, so most groups have equal rewards: the same work to produce, no gradient). Steady: from the "
         "first step to the last, without the controllers' start-up (each process imports torch and loads the "
         "model); tokens are those of the samples consumed after the first step."), "",
        ("| arm | wall s | consumed samples/s, steady | vs sync | consumed samples/s, whole run | generated tokens/s, "
         "steady | of the engine's batched tokens/s | engine load |"),
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (wall, steady, whole, tokens, load) in rows.items():
        lines.append(f"| {name} | {wall:.1f} | {steady:.2f} | {steady / rows['sync'][1]:.2f}x | {whole:.2f} | "
                     f"{tokens:.0f} | {tokens / limit:.0%} | {load:.0%} |")
    lines.append("")
    report(lines, record=not args.no_record)


# --- learning --------------------------------------------------------------------------------------------------


def heldout(task_id: str) -> bool:
    return hashlib.blake2b(task_id.encode(), digest_size=2).digest()[0] % 2 == 1


def learning(args: argparse.Namespace) -> None:
    from inference.checkpoint import save_model
    from inference.engine_factory import load_engine
    from inference.metrics import paired_bootstrap_ci
    from inference.tokenizer import load as load_tokenizer
    from training.async_rl.config import RLConfig
    from training.async_rl.controllers import score_tasks
    from training.async_rl.run import RLRun

    model_dir, tasks = resolve(args.data_dir, args.base, args.tasks)
    train = [t for t in tasks if not heldout(t.task_id)]
    test = [t for t in tasks if heldout(t.task_id)][: args.max_heldout]
    config = RLConfig(steps=args.steps, batch_size=args.batch_size, num_generations=args.group, controllers=2,
                      concurrency=args.concurrency, checkpoint_every=args.steps, learning_rate=args.learning_rate,
                      seed=0, sampling={"max_tokens": args.max_tokens, "max_turns": 4})
    started = time.perf_counter()
    before = score_tasks(load_engine(f"hf:{model_dir}"), test, args.k, config)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-rl-learning-"))
    try:
        result = RLRun(model_dir, train, config, run_dir, resume=False).run()
        trained_dir = run_dir / "model"
        save_model(result.model, load_tokenizer(model_dir), trained_dir, {"base": str(model_dir), "method": "rl"})
        after = score_tasks(load_engine(f"hf:{trained_dir}"), test, args.k, config)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    wall = time.perf_counter() - started
    lines = ["", f"## RL learning over the base model ({time.strftime('%Y-%m-%d')}, {machine()})", "",
             (f"`python -m bench.bench_rl learning`: base `{args.base}`, tasks of `{', '.join(args.tasks)}` split by "
             f"id hash: {len(train)} trained on, {len(test)} held out; {args.steps} steps of {args.batch_size} samples "
             f"(G = {args.group}, lr {args.learning_rate:g}); {args.k} samples per held-out task before and after; "
             f"wall {wall / 60:.1f} min. Difference: mean over held-out tasks of (after - before) per-task mean "
             "reward, percentile bootstrap 95% interval."), "",
             "| held-out source | tasks | reward before | reward after | difference [95% CI] |", "|---|---|---|---|---|"]
    groups: dict[str, list[str]] = {}
    for task in test:
        groups.setdefault("environment tasks" if task.kind == "env" else task.source, []).append(task.task_id)
    groups["all"] = [t.task_id for t in test]
    for name, ids in groups.items():
        b = [sum(before[i]) / len(before[i]) for i in ids]
        a = [sum(after[i]) / len(after[i]) for i in ids]
        diff = paired_bootstrap_ci(a, b, resamples=10_000)
        lines.append(f"| {name} | {len(ids)} | {sum(b) / len(b):.3f} | {sum(a) / len(a):.3f} | "
                     f"{diff.value:+.3f} [{diff.lo:+.3f}, {diff.hi:+.3f}] |")
    rewards = result.steps["reward_mean"].to_list()
    lines += ["", (f"Training reward, first 5 vs last 5 steps: {sum(rewards[:5]) / 5:.3f} -> "
              f"{sum(rewards[-5:]) / 5:.3f}; equal-reward groups (no gradient): "
              f"{int(result.steps['zero_variance_groups'].sum())} of {int(result.steps['groups'].sum())}."), ""]
    report(lines, record=not args.no_record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    doubles = sub.add_parser("latency")
    doubles.add_argument("--steps", type=int, default=30)
    doubles.add_argument("--batch-size", type=int, default=16)
    doubles.add_argument("--group", type=int, default=4)
    doubles.add_argument("--controllers", type=int, default=4)
    doubles.add_argument("--concurrency", type=int, default=8)
    doubles.add_argument("--median", type=float, default=0.2, help="median engine-call latency, s")
    doubles.add_argument("--sigma", type=float, default=1.4, help="lognormal sigma (1.4: p99 = 26x median)")
    doubles.add_argument("--step-s", type=float, default=0.1, help="trainer step wall time, s")
    doubles.add_argument("--no-record", action="store_true")
    real = sub.add_parser("engines")
    real.add_argument("--steps", type=int, default=60)
    real.add_argument("--batch-size", type=int, default=8)
    real.add_argument("--group", type=int, default=4)
    real.add_argument("--concurrency", type=int, default=8)
    real.add_argument("--max-tokens", type=int, default=24)
    real.add_argument("--no-record", action="store_true")
    for name in ("throughput", "learning"):
        p = sub.add_parser(name)
        p.add_argument("--data-dir", required=True)
        p.add_argument("--base", required=True, help="model artifact key or stage, or a transformers directory")
        p.add_argument("--tasks", nargs="+", default=["small_envs"] if name == "throughput" else
                       ["small_envs", "keychain"])
        p.add_argument("--steps", type=int, default=12 if name == "throughput" else 40)
        p.add_argument("--batch-size", type=int, default=16)
        p.add_argument("--group", type=int, default=4)
        p.add_argument("--concurrency", type=int, default=16)
        p.add_argument("--no-record", action="store_true")
    sub.choices["throughput"].add_argument("--median", type=float, default=0.05, help="median tool latency, s")
    sub.choices["throughput"].add_argument("--sigma", type=float, default=1.4, help="lognormal sigma")
    learn = sub.choices["learning"]
    learn.add_argument("--k", type=int, default=8)
    learn.add_argument("--max-heldout", type=int, default=64)
    learn.add_argument("--learning-rate", type=float, default=5e-5)
    learn.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    from inference.cpu import tune_allocator

    tune_allocator()
    {"throughput": throughput, "learning": learning, "latency": latency, "engines": engines}[args.command](args)


if __name__ == "__main__":
    main()

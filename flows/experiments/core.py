"""Running a declared experiment: every arm at every seed through an executor (the pipeline's own stages, or a
scripted test double), each run's held-out scores turned into metric matrices, and the declared comparisons.

An executor owns how an arm becomes scores; this module owns what is measured and how arms are compared, so the
statistics a test checks on a scripted trainer are the statistics a real run reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import polars as pl

from flows.experiments.config import Experiment, Metric
from flows.experiments.stats import Comparison, compare
from inference.metrics import Estimate, bootstrap_ci, pass_at_k

ALL = "all"


@dataclass(frozen=True)
class ArmRun:
    """One arm trained with one seed and scored: the held-out scores (heldout_score rows), its learning curve
    (x, y), the artifacts it made or used (name -> key) and its wall time."""

    arm: str
    seed: int
    scores: pl.DataFrame
    curve: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"x": pl.Float64, "y": pl.Float64}))
    artifacts: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


class Executor(Protocol):
    def run(self, experiment: Experiment, arm: str, seed: int, profile: str) -> ArmRun: ...

    def score_base(self, experiment: Experiment, profile: str) -> pl.DataFrame | None:
        """The base model's held-out scores (the reference every arm moved from), None when not measured."""

    def priors(self, experiment: Experiment, profile: str) -> dict[str, pl.DataFrame]:
        """Prior-only baselines' held-out scores (flows/experiments/priors.py), by label; empty when none apply."""


@dataclass(frozen=True)
class Result:
    experiment: Experiment
    profile: str
    seeds: int
    runs: list[ArmRun]
    comparisons: dict[tuple[str, str], list[Comparison]]  # (metric, group) -> one per declared comparison
    wall_s: float
    base: dict[tuple[str, str], Estimate] = field(default_factory=dict)  # the untrained base model, same units
    priors: dict[str, dict[tuple[str, str], Estimate]] = field(default_factory=dict)  # label -> as base

    @property
    def primary(self) -> list[Comparison]:
        return self.comparisons[(self.experiment.statistics.metrics[0], ALL)]


def unit_values(scores: pl.DataFrame, metric: Metric, pass_k: int = 1) -> dict[str, float]:
    """A metric's value per held-out unit of one run: a task (mean_reward, pass_at_k, clean/noisy scores) or a clean
    task with noisy twins (robustness_gap)."""
    per_task = scores.group_by("task_id", "noise_level", "clean_task_id").agg(
        pl.col("reward").mean().alias("mean"), pl.len().alias("n"), (pl.col("reward") >= 1.0 - 1e-9).sum().alias("c"))
    if metric == "mean_reward":
        return dict(per_task.select("task_id", "mean").iter_rows())
    if metric == "pass_at_k":
        return {t: pass_at_k(n, c, min(pass_k, n)) for t, n, c in per_task.select("task_id", "n", "c").iter_rows()}
    clean = per_task.filter(pl.col("noise_level") == 0)
    noisy = per_task.filter(pl.col("noise_level") > 0)
    if metric == "clean_score":
        return dict(clean.select("task_id", "mean").iter_rows())
    if metric == "noisy_score":
        return dict(noisy.select("task_id", "mean").iter_rows())
    twins = noisy.group_by("clean_task_id").agg(pl.col("mean").mean().alias("noisy"))
    paired = clean.join(twins, left_on="task_id", right_on="clean_task_id")
    return {t: c - n for t, c, n in paired.select("task_id", "mean", "noisy").iter_rows()}


def matrices(runs: Sequence[ArmRun], arms: Sequence[str], metric: Metric, pass_k: int, group: str = ALL
             ) -> dict[str, np.ndarray]:
    """arm -> [seed, unit] over the units every run of every arm was scored on (a unit one run lacks would make
    the arms incomparable), units in a stable order."""
    values = {}
    for run in runs:
        scores = run.scores if group == ALL else run.scores.filter(pl.col("source") == group)
        values[(run.arm, run.seed)] = unit_values(scores, metric, pass_k)
    common = sorted(set.intersection(*(set(v) for v in values.values()))) if values else []
    if not common:
        raise ValueError(f"no held-out unit for {metric} ({group}) is shared by every run")
    return {arm: np.array([[values[(r.arm, r.seed)][u] for u in common] for r in runs if r.arm == arm])
            for arm in arms}


def run_experiment(experiment: Experiment, executor: Executor, *, profile: str = "tiny", seeds: int | None = None,
                   on_run: Callable[[ArmRun], None] | None = None, on_seed: Callable[[Result], None] | None = None,
                   stats_seed: int = 0) -> Result:
    """Every arm at seeds 0..seeds-1, interleaved by seed, then the declared comparisons on every metric, over all
    units and per declared group. ``on_seed`` gets the analysis of the seeds so far after every whole seed but the
    last, so a run cut short still leaves its evidence."""
    seeds = seeds or experiment.seeds
    started = time.perf_counter()
    runs = []
    for seed in range(seeds):
        for arm in experiment.arms:
            run = executor.run(experiment, arm, seed, profile)
            runs.append(run)
            if on_run is not None:
                on_run(run)
        if on_seed is not None and seed < seeds - 1:
            on_seed(analyse(experiment, profile, seed + 1, list(runs), time.perf_counter() - started, stats_seed))
    base = executor.score_base(experiment, profile)
    return analyse(experiment, profile, seeds, runs, time.perf_counter() - started, stats_seed, base,
                   executor.priors(experiment, profile))


def estimates(experiment: Experiment, scores: pl.DataFrame, units: Sequence[tuple[str, str]]
              ) -> dict[tuple[str, str], Estimate]:
    """One model's (or baseline's) scores as an interval over units, per (metric, group) of ``units``."""
    stats = experiment.statistics
    out = {}
    for metric, group in units:
        values = list(unit_values(scores if group == ALL else scores.filter(pl.col("source") == group), metric,
                                  stats.pass_k).values())
        if values:
            out[(metric, group)] = bootstrap_ci(values, resamples=stats.resamples, confidence=stats.confidence)
    return out


def analyse(experiment: Experiment, profile: str, seeds: int, runs: list[ArmRun], wall_s: float,
            stats_seed: int = 0, base_scores: pl.DataFrame | None = None,
            prior_scores: dict[str, pl.DataFrame] | None = None) -> Result:
    stats = experiment.statistics
    comparisons: dict[tuple[str, str], list[Comparison]] = {}
    for metric in stats.metrics:
        for group in (ALL, *experiment.evaluation.groups):
            try:
                by_arm = matrices(runs, list(experiment.arms), metric, stats.pass_k, group)
            except ValueError:
                continue  # e.g. a gap over a group without noisy twins: nothing to compare, nothing reported
            comparisons[(metric, group)] = [
                compare(by_arm[a], by_arm[b], (a, b), test=stats.test, resamples=stats.resamples,
                        confidence=stats.confidence, seed=stats_seed) for a, b in experiment.comparisons]
    if (stats.metrics[0], ALL) not in comparisons:
        raise ValueError(f"experiment {experiment.name}: the primary metric {stats.metrics[0]} has no unit scored in "
                         "every run")
    base = estimates(experiment, base_scores, list(comparisons)) if base_scores is not None else {}
    # a prior's expected reward is no sampled attempt: only the mean reward is defined for it
    units = [(metric, group) for metric, group in comparisons if metric == "mean_reward"]
    priors = {label: estimates(experiment, scores, units) for label, scores in (prior_scores or {}).items()}
    return Result(experiment, profile, seeds, runs, comparisons, wall_s, base, priors)

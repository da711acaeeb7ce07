"""The pipeline executor: an arm at a seed as ordinary artifacts of the pipeline's own stages, each through the
store (key, cache, gate, atomic publish) and recorded in the catalog with its lineage:

1. the base model (``base.model``, then each phase of ``base.cold_start`` through the ``sft`` stage, each phase's
   data built with its own overrides), the same artifact for every arm and seed;
2. the arm's training data: the ``train_on`` stages under the profile plus the experiment's and the arm's overrides;
3. the trained model: the ``rl`` or ``sft`` stage (``flows.train.plan_rl`` / ``plan_sft``: the same plans as
   ``gymforge train``), the profile's config plus the experiment's budget, the arm's overrides and ``seed``;
4. the held-out data (the experiment's overrides plus the evaluation's);
5. ``heldout_score``: the trained model on the held-out tasks, attempt seeds shared by the arms at one seed.

Everything is keyed by its params and inputs, so a re-run of an experiment is a sequence of cache hits, and a
new seed or arm computes only itself.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import polars as pl

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage, run_serially
from data_contracts.stage import StageError
from flows.experiments.config import Experiment, Overrides
from flows.experiments.core import ArmRun
from flows.profiles import parse, stage_params
from flows.registry import discover, stage_named
from flows.train import plan_rl, plan_sft


def merged(*layers: Overrides) -> Overrides:
    """Stage overrides, later layers winning field by field."""
    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for stage, fields in layer.items():
            out[stage] = {**out.get(stage, {}), **fields}
    return out


class PipelineExecutor:
    """Runs arms on a data root, in this process (a training stage never runs inside a Dask worker)."""

    def __init__(self, data_dir: str | Path, *, partition: str = "default", flow_run_id: str | None = None,
                 progress: bool = False) -> None:
        self.root = str(data_dir)
        self.store, self.catalog = open_store(self.root), Catalog(self.root)
        self.partition = partition
        self.flow_run_id = flow_run_id
        self.progress = progress
        discover()

    def check(self, experiment: Experiment, profile: str) -> None:
        """Every override of the experiment is valid for its stage and its base model exists (before anything
        runs)."""
        if experiment.base.directory is None:
            try:
                stage_named(experiment.base.model)
            except StageError as exc:
                raise StageError(f"base {experiment.base.model!r} is neither a local model directory nor a stage: "
                                 f"{exc}") from None
        for layer in (experiment.data, experiment.evaluation.data, *(a.data for a in experiment.arms.values()),
                      *(phase.data for phase in experiment.base.cold_start)):
            stage_params(profile, merged(experiment.data, layer))
        for name, arm in experiment.arms.items():
            overrides = {**experiment.trainer_budget, **arm.train, "seed": 0}
            try:
                parse(arm.trainer, {**stage_params(profile).get(arm.trainer, {}), **overrides})
            except StageError as exc:
                raise StageError(f"experiment {experiment.name}, arm {name}: {exc}") from None
        parse("heldout_score", experiment.evaluation.score)

    def _build(self, stages: list[str], profile: str, overrides: Overrides) -> dict[str, str]:
        """The stages' artifacts (and their upstream) under ``profile`` + ``overrides``: stage -> key."""
        runs = run_serially(self.store, self.catalog, stages, stage_params(profile, overrides), self.partition,
                            progress=self.progress, flow_run_id=self.flow_run_id)
        return {name: runs[name].key for name in stages}

    def _execute(self, plan: Any) -> str:
        """A training plan through the store; its run directory goes once the model is published (as train_rl's)."""
        key = execute_stage(self.store, self.catalog, plan.stage, plan.params, plan.input_keys, self.partition,
                            flow_run_id=self.flow_run_id).key
        shutil.rmtree(plan.checkpoints, ignore_errors=True)
        return key

    def base(self, experiment: Experiment, profile: str) -> tuple[str, str]:
        """(stage, key) of the model every arm starts from; ("directory", path) for a local checkpoint."""
        base = experiment.base
        if base.directory:
            stage, model = "directory", str(base.directory)
        else:
            stage, model = base.model, self._build([base.model], profile, experiment.data)[base.model]
        for phase in base.cold_start:
            keys = self._build(phase.sft_on, profile, merged(experiment.data, phase.data))
            plan = plan_sft([keys[s] for s in phase.sft_on], model, profile=profile, overrides=phase.sft,
                            partition=self.partition, data_dir=self.root)
            stage, model = "sft", self._execute(plan)
        return stage, model

    def _heldout(self, experiment: Experiment, profile: str) -> dict[str, str]:
        return self._build(list(experiment.evaluation.heldout), profile,
                           merged(experiment.data, experiment.evaluation.data))

    def _score(self, experiment: Experiment, model: tuple[str, str], heldout: dict[str, str], seed: int) -> str:
        """heldout_score of a model artifact (stage, key), or of a local directory ("directory", path)."""
        stage, ref = model
        params = {**experiment.evaluation.score, "seed": seed}
        if stage == "directory":
            scorer, keys = stage_named("heldout_score").with_inputs(list(heldout)), dict(heldout)
            params["model_name_or_path"] = ref
        else:
            scorer, keys = stage_named("heldout_score").with_inputs([stage, *heldout]), {stage: ref, **heldout}
        return execute_stage(self.store, self.catalog, scorer, params, keys, self.partition,
                             flow_run_id=self.flow_run_id).key

    def score_base(self, experiment: Experiment, profile: str) -> pl.DataFrame:
        """The base model on the held-out units, attempts seeded as seed 0's."""
        key = self._score(experiment, self.base(experiment, profile), self._heldout(experiment, profile), 0)
        return self.store.get("heldout_score", key).read("scores")

    def priors(self, experiment: Experiment, profile: str) -> dict[str, pl.DataFrame]:
        """Each arm's prior-only baselines on the held-out prompt tasks, from the answers of its training data."""
        from flows.experiments.priors import prior_scores
        from training.async_rl.sources import load_tasks

        def tasks(keys: dict[str, str]) -> list:
            try:
                return load_tasks({stage: self.store.get(stage, key) for stage, key in keys.items()})
            except StageError:  # e.g. trajectories for SFT: no answers to take a prior from
                return []

        heldout = tasks(self._heldout(experiment, profile))
        out = {}
        for name, arm in experiment.arms.items():
            train = tasks(self._build(list(arm.train_on), profile, merged(experiment.data, arm.data)))
            out.update({f"{name}: {label}": scores for label, scores in prior_scores(train, heldout).items()})
        return out

    def run(self, experiment: Experiment, arm_name: str, seed: int, profile: str) -> ArmRun:
        started = time.perf_counter()
        arm = experiment.arms[arm_name]
        base_stage, base_key = self.base(experiment, profile)
        data = self._build(list(arm.train_on), profile, merged(experiment.data, arm.data))
        # an arm that learns nothing is a result the comparison measures (its scores equal the base's), not an error
        overrides = {**experiment.trainer_budget, **arm.train, "seed": seed, "allow_untrained": True}
        refs = [data[s] for s in arm.train_on]
        if arm.trainer == "rl":
            plan = plan_rl(refs, base_key, profile=profile, overrides=overrides, partition=self.partition,
                           data_dir=self.root)
        else:
            plan = plan_sft(refs, base_key, profile=profile, overrides=overrides, partition=self.partition,
                            data_dir=self.root)
        model_key = self._execute(plan)
        model = self.store.get(arm.trainer, model_key)
        heldout = self._heldout(experiment, profile)
        score_key = self._score(experiment, (arm.trainer, model_key), heldout, seed)
        scores = self.store.get("heldout_score", score_key).read("scores")
        artifacts = {f"base {base_stage}": base_key, **{f"data {s}": k for s, k in data.items()},
                     f"model {arm.trainer}": model_key, **{f"held-out {s}": k for s, k in heldout.items()},
                     "heldout_score": score_key}
        return ArmRun(arm_name, seed, scores, learning_curve(model, experiment.curve), artifacts,
                      time.perf_counter() - started)


def learning_curve(model: Any, kind: str) -> pl.DataFrame:
    """(x, y) of a trained model artifact: rl reward against cumulative trained samples, or sft training loss
    against the step."""
    if kind == "reward" and "steps" in model.outputs:
        steps = model.read("steps").sort("version")
        return steps.select(pl.col("trained_samples").cum_sum().cast(pl.Float64).alias("x"),
                            pl.col("reward_mean").cast(pl.Float64).alias("y"))
    if "metrics" in model.outputs:
        metrics = model.read("metrics").filter((pl.col("split") == "train") & (pl.col("name") == "loss"))
        return metrics.select(pl.col("step").cast(pl.Float64).alias("x"), pl.col("value").cast(pl.Float64).alias("y"))
    return pl.DataFrame(schema={"x": pl.Float64, "y": pl.Float64})


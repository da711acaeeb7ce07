"""The training flows: GPU work as Prefect flows of their own, run in-process by `gymforge train ...` or as
deployments on the `gpu` process work pool (one run at a time; never inside a Dask worker, DESIGN.md section 4).

``train_sft`` resolves its inputs from the catalog (trajectory artifacts by key or stage name, the base model as a
model artifact key or a local directory), runs the ``sft`` stage through the store (key, cache, gate, atomic
publish: an identical re-run is a cache hit, a killed run publishes nothing), keeps its checkpoints under
``<data root>/checkpoints/sft/<artifact key>`` so ``resume`` continues a killed run, and leaves the loss curve (PNG)
and the before/after evaluation table as Prefect artifacts. ``train_rl`` does the same for the ``rl`` stage: task
artifacts instead of trajectories, the reward, staleness and throughput curves and the step metrics as its Prefect
artifacts.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from data_contracts.catalog import Catalog
from data_contracts.roots import data_root, open_store, published
from data_contracts.runner import StageRun, execute_stage
from data_contracts.stage import Params, Stage, StageError
from data_contracts.store import ArtifactStore, PublishedArtifact
from flows.failures import fails_cleanly
from flows.figures import draw_figure, figure_markdown
from flows.live import live_progress
from flows.profiles import parse, stage_params
from inference.tokenizer import load as load_tokenizer
from training.async_rl.sources import load_tasks
from training.rl import rl as rl_stage
from training.sft import sft as sft_stage
from training.sft_data import choose_template, trajectory_outputs


@dataclass(frozen=True)
class TrainingRun:
    """What a training flow will run: the stage with its inputs, its params, the input keys and artifact key."""

    stage: Stage
    params: Params
    input_keys: dict[str, str]
    key: str
    checkpoints: Path
    base: str  # what it starts from, as people name it: a model artifact (stage/key) or a directory's name
    notes: tuple[str, ...] = ()  # what the run does differently from what was asked, said before it starts

    def run_name(self, flow_name: str, steps: str) -> str:
        """``train-sft tiny_policy/fd310e95 60 steps -> 4ff36719``: tells runs apart in the Prefect runs list."""
        return f"{flow_name} {self.base} {steps} -> {self.key[:8]}"


def with_base(params: Params, base: str, catalog: Catalog, store: ArtifactStore, input_keys: dict[str, str],
              trainer: str) -> tuple[Params, Path, str]:
    """The base model of a ``trainer`` run: a local transformers directory becomes ``model_name_or_path`` (its
    content enters the artifact key), a model artifact key or stage becomes one more input, except a model of the
    trainer's own stage (an SFT run continuing an SFT model): a stage cannot be its own input, so that one enters as
    its directory. Returns the params, the base's directory and its short name (``tiny_policy/fd310e95``, or the
    directory's name)."""
    base_path = Path(base).expanduser()
    if base_path.is_dir():
        if not (base_path / "config.json").is_file():
            raise StageError(f"base model {base_path}: not a transformers checkpoint directory (no config.json)")
        return params.model_copy(update={"model_name_or_path": str(base_path.resolve())}), base_path, base_path.name
    if looks_like_path(base):
        raise StageError(f"base model directory {base_path} does not exist")
    model = published(catalog, store, base)
    if model.manifest.get("kind") != "model":
        raise StageError(f"base {base!r} is artifact {model.stage}/{model.key} of kind "
                         f"{model.manifest.get('kind', 'data')}, not a model")
    name = f"{model.stage}/{model.key[:8]}"
    if model.stage == trainer:
        return params.model_copy(update={"model_name_or_path": str(model.directory.resolve())}), model.directory, name
    if model.stage in input_keys:
        raise StageError(f"the base model and a data artifact both come from stage {model.stage!r}")
    input_keys[model.stage] = model.key
    return params, model.directory, name


def looks_like_path(ref: str) -> bool:
    """A reference written as a path (``/models/x``, ``./ckpt``, ``~/m``), never an artifact key or a stage name."""
    return ref.startswith((".", "~")) or "/" in ref or "\\" in ref


def plan_sft(data: Sequence[str], base: str, *, profile: str = "tiny", overrides: Mapping[str, Any] | None = None,
             resume: bool = False, partition: str = "default", data_dir: str | None = None) -> TrainingRun:
    """Resolve and check everything an SFT run needs, before any server, cluster or training step: the params
    (profile + overrides), each data artifact (published, with a trajectory output), the base model (a model
    artifact key, or a local transformers directory), the artifact key and the checkpoint directory."""
    params = parse("sft", stage_params(profile, {"sft": dict(overrides or {})})["sft"])
    if not data:
        raise StageError("name at least one trajectory artifact to train on (--data KEY)")
    root = data_root(data_dir)
    store, catalog = open_store(root), Catalog(root)
    input_keys: dict[str, str] = {}
    for ref in data:
        artifact = published(catalog, store, ref)
        if not trajectory_outputs(artifact):
            raise StageError(f"artifact {artifact.stage}/{artifact.key} holds no trajectories (its outputs: "
                             f"{', '.join(artifact.outputs)}); train on a trajectory artifact such as sft_set or "
                             "small_envs")
        input_keys[artifact.stage] = artifact.key
    params, base_dir, base_name = with_base(params, base, catalog, store, input_keys, sft_stage.name)
    choice = choose_template(load_tokenizer(base_dir), params.chat_template, f"base model {base_name}")
    notes = () if choice.template is None else (
        f"chat template: {choice.reason} (recorded in the model card; --chat-template keep refuses instead)",)
    stage = sft_stage.with_inputs(list(input_keys))
    key = store.artifact_key(stage, params, input_keys, partition)
    checkpoints = store.home / "checkpoints" / stage.name / key
    params = params.model_copy(update={"output_dir": str(checkpoints), "resume_from_checkpoint": resume,
                                       "logging_dir": str(store.home / "tensorboard" / stage.name / key)})
    return TrainingRun(stage, params, input_keys, key, checkpoints, base_name, notes)


@task(task_run_name="{run.stage.name}/{partition}", cache_policy=NO_CACHE)  # the artifact store is the cache
def train_task(run: TrainingRun, partition: str, data_dir: str) -> StageRun:
    from prefect.runtime import flow_run

    return execute_stage(open_store(data_dir), Catalog(data_dir), run.stage, run.params, run.input_keys,
                         partition, flow_run_id=flow_run.id)


def evaluation_table(metrics: pl.DataFrame) -> list[dict[str, Any]]:
    """One row per held-out figure: its value before the first step and at the end, and its change with the 95%
    interval where the run measured one (tool-call validity: training/sft_eval.py ``change_interval``)."""
    evals = metrics.filter(pl.col("split") == "eval")
    if evals.is_empty():
        return []
    first, last = evals["step"].min(), evals["step"].max()
    before = dict(evals.filter(pl.col("step") == first).select("name", "value").iter_rows())
    after = dict(evals.filter(pl.col("step") == last).select("name", "value").iter_rows())
    changes = {name for name in after if f"{name}_change_low" in after}
    rows = []
    for name in sorted(after):
        if name in COUNTS or name.removesuffix("_low").removesuffix("_high").endswith("_change"):
            continue
        row = {"figure": name, f"step {first}": round(before.get(name, float("nan")), 4),
               f"step {last}": round(after[name], 4)}
        if changes:
            row["change [95% CI]"] = (f"{after[f'{name}_change']:+.3f} [{after[f'{name}_change_low']:+.3f}, "
                                      f"{after[f'{name}_change_high']:+.3f}]") if name in changes else ""
        rows.append(row)
    return rows


COUNTS = {"num_tokens"}  # what artifacts published before training_metric left counts out logged as figures


def report(store: ArtifactStore, stage: Stage, artifact: PublishedArtifact) -> dict[str, Any]:
    """The flow run's Prefect artifacts (the stage's figure, evaluation table) and its summary."""
    table = evaluation_table(artifact.read("metrics"))
    create_table_artifact(table=table or [{"figure": "no eval split", "value": ""}], key="sft-evaluation",
                          description=f"**sft** `{artifact.key}`: held-out figures before training and at the end")
    if (figure := draw_figure(store, stage, artifact.key)) is not None:
        create_markdown_artifact(markdown=figure_markdown(figure, f"sft {artifact.key}"), key="sft-loss-curve")
    summary = artifact.read("summary").row(0, named=True)
    return {"key": artifact.key, "model": str(artifact.directory), "evaluation": table, **summary,
            "rejected": artifact.rows.get("rejected", 0)}


def rename_run(name: str) -> None:
    """Rename this flow run once its plan says what differs (model, steps, key): the name it starts with can only
    say what it was given."""
    from prefect import get_client
    from prefect.runtime import flow_run

    get_client(sync_client=True).update_flow_run(flow_run.id, name=name)


def run_name(flow_name: str) -> Callable[[], str]:
    """A training flow's run name until it is planned (``rename_run``): the flow, the profile and partition."""

    def name() -> str:
        from prefect.runtime import flow_run

        parameters = flow_run.parameters
        profile = Path(str(parameters.get("profile", "tiny"))).stem
        return f"{flow_name} {profile}/{parameters.get('partition', 'default')}"

    return name


@flow(name="train-sft", flow_run_name=run_name("train-sft"))
@fails_cleanly
def train_sft(
    data: list[str],
    base: str,
    profile: str = "tiny",
    overrides: dict[str, Any] | None = None,
    resume: bool = False,
    partition: str = "default",
    data_dir: str | None = None,
) -> dict[str, Any]:
    """Cold-start SFT of a base model on trajectory artifacts; publishes a model artifact.

    Args:
        data: trajectory artifacts to train on: keys, or stage names with one published artifact each.
        base: the base model: a model artifact key, or a local transformers directory.
        profile: tiny | small | default | full, or a path to a profile YAML (its `sft` section).
        overrides: {param: value} of the sft config on top of the profile (TRL's names).
        resume: continue from the last complete checkpoint of this exact run (same inputs and config).
        partition: the partition to record the run under.
        data_dir: data root; none means $GYMFORGE_DATA, else ./data.
    """
    logger = get_run_logger()
    root = data_root(data_dir)
    store = open_store(root)
    store.clean_partial()  # a killed run's scratch space
    run = plan_sft(data, base, profile=profile, overrides=overrides, resume=resume, partition=partition,
                   data_dir=str(root))
    steps = run.params.max_steps  # type: ignore[attr-defined]
    name = run.run_name("train-sft", f"{steps} steps" if steps > 0 else
                        f"{run.params.num_train_epochs:g} epochs")  # type: ignore[attr-defined]
    rename_run(name)
    for note in run.notes:
        logger.info(note)
    logger.info("sft %s on %s (checkpoints in %s)", run.key, run.input_keys, run.checkpoints)
    with live_progress():
        result = train_task(run, partition, str(root))
    artifact = store.get(run.stage.name, result.key)
    if artifact is None:
        raise StageError(f"the sft artifact {result.key} disappeared from {root} right after the run")
    if result.cached:
        rename_run(f"{name} (cached)")
    else:  # published: its checkpoints have served their purpose
        shutil.rmtree(run.checkpoints, ignore_errors=True)
    logger.info("sft %s %s", result.key, "cached" if result.cached else "published")
    return {**report(store, run.stage, artifact), "cached": result.cached, "notes": list(run.notes)}


# --- reinforcement learning ----------------------------------------------------------------------------------------


def plan_rl(tasks: Sequence[str], base: str, *, profile: str = "tiny", overrides: Mapping[str, Any] | None = None,
            resume: bool = False, partition: str = "default", data_dir: str | None = None, engine: str | None = None,
            dask_address: str | None = None) -> TrainingRun:
    """Resolve and check everything an RL run needs before any server or process starts: the params (profile +
    overrides), each task artifact (published, offering RL tasks), the base model, the artifact key and the run
    directory (engine weights and checkpoints)."""
    params = parse("rl", stage_params(profile, {"rl": dict(overrides or {})})["rl"])
    if not tasks:
        raise StageError("name at least one task artifact to train on (--tasks KEY: small_envs, keychain, rl_mix...)")
    root = data_root(data_dir)
    store, catalog = open_store(root), Catalog(root)
    artifacts = {}
    for ref in tasks:
        artifact = published(catalog, store, ref)
        artifacts[artifact.stage] = artifact
    load_tasks(artifacts)  # a StageError names an input that offers no RL task
    input_keys = {name: artifact.key for name, artifact in artifacts.items()}
    params, _, base_name = with_base(params, base, catalog, store, input_keys, rl_stage.name)
    stage = rl_stage.with_inputs(list(input_keys))
    key = store.artifact_key(stage, params, input_keys, partition)
    checkpoints = store.home / "checkpoints" / stage.name / key
    params = params.model_copy(update={"output_dir": str(checkpoints), "resume": resume, "engine": engine,
                                       "dask_address": dask_address,
                                       "logging_dir": str(store.home / "tensorboard" / stage.name / key)})
    if engine is not None:  # malformed, dead, refusing, serving another model, or unable to load new weights
        from inference.engine_factory import probe_engine
        from inference.engine_support import EngineUnavailable

        try:
            probe_engine(engine, weights=True)
        except EngineUnavailable as exc:
            raise StageError(str(exc)) from None
    return TrainingRun(stage, params, input_keys, key, checkpoints, base_name)


STEP_COLUMNS = ("version", "reward_mean", "loss", "kl", "clip_ratio", "ratio_on_policy", "zero_variance_groups",
                "staleness_mean", "staleness_max", "queue_depth", "samples_per_s", "engine_load", "drops", "requeued")


def report_rl(artifact: PublishedArtifact, root: Path) -> dict[str, Any]:
    """The flow run's Prefect artifacts (the step metrics; reward, staleness and throughput curves) and its
    summary, every figure of what was measured: staleness is that of the samples the trainer consumed (as the live
    line shows it), the trained ones among them counted apart."""
    from training.async_rl.plot import plot_runs
    from training.async_rl.trainer import NO_GRADIENT

    steps, samples = artifact.read("steps"), artifact.read("samples")
    create_table_artifact(table=steps.select(STEP_COLUMNS).with_columns(pl.col(pl.Float64).round(4)).to_dicts(),
                          key="rl-metrics", description=f"**rl** `{artifact.key}`: one row per optimizer step")
    trained = int(samples["trained"].sum())
    if trained:
        figure = plot_runs({"rl": (steps, samples)}, root / "figures" / f"rl-{artifact.key}.png", f"rl {artifact.key}")
        create_markdown_artifact(markdown=figure_markdown(figure, f"rl {artifact.key}"), key="rl-curves")
    else:  # three empty plots would say nothing; this says why
        create_markdown_artifact(markdown=f"**rl** `{artifact.key}`: no sample was trained on, so there are no "
                                          "reward or staleness curves", key="rl-curves")
    consumed = samples.filter(pl.col("trained") | (pl.col("drop_reason") == NO_GRADIENT))
    drops = samples.filter(pl.col("drop_reason").is_not_null()).group_by("drop_reason").len().sort("drop_reason")
    last = steps.tail(min(3, steps.height))
    return {"key": artifact.key, "model": str(artifact.directory), "steps": steps.height,
            "trained_samples": trained, "consumed_samples": consumed.height,
            "reward_last": float(last["reward_mean"].mean()),
            "reward_first": float(steps.head(min(3, steps.height))["reward_mean"].mean()),
            "staleness_mean": float(consumed["staleness"].mean() or 0.0),
            "staleness_max": int(consumed["staleness"].max() or 0),
            "samples_per_s": float(steps["samples_per_s"][-1]), "engine_load": float(steps["engine_load"][-1]),
            # 1 when the trainer scores the distribution the engines sampled from (null: no on-policy sample)
            "ratio_on_policy": steps["ratio_on_policy"].mean(),
            "dropped": dict(drops.iter_rows())}


@flow(name="train-rl", flow_run_name=run_name("train-rl"))
@fails_cleanly
def train_rl(
    tasks: list[str],
    base: str,
    profile: str = "tiny",
    overrides: dict[str, Any] | None = None,
    resume: bool = False,
    partition: str = "default",
    data_dir: str | None = None,
    engine: str | None = None,
    dask_address: str | None = None,
) -> dict[str, Any]:
    """Asynchronous RL of a model on task artifacts (tool environments, KeyChain and other prompts); publishes a
    model artifact with every sample's audit row and every step's metrics.

    Args:
        tasks: task artifacts: keys, or stage names with one published artifact each (small_envs, keychain,
            rl_mix, noisy_tasks with its environments...).
        base: the starting model: a model artifact key (an SFT checkpoint), or a local transformers directory.
        profile: tiny | small | default | full, or a path to a profile YAML (its `rl` section).
        overrides: {param: value} of the rl config on top of the profile.
        resume: continue from the last checkpoint of this exact run (same inputs and config).
        partition: the partition to record the run under.
        data_dir: data root; none means $GYMFORGE_DATA, else ./data.
        engine: the controllers' engine (openai:URL#MODEL for vLLM servers); default the base model in each.
        dask_address: run the controllers on this Dask cluster instead of local processes.
    """
    logger = get_run_logger()
    root = data_root(data_dir)
    store = open_store(root)
    store.clean_partial()  # a killed run's scratch space
    run = plan_rl(tasks, base, profile=profile, overrides=overrides, resume=resume, partition=partition,
                  data_dir=str(root), engine=engine, dask_address=dask_address)
    name = run.run_name("train-rl", f"{run.params.steps} steps")  # type: ignore[attr-defined]
    rename_run(name)
    logger.info("rl %s on %s (run directory %s)", run.key, run.input_keys, run.checkpoints)
    with live_progress():
        result = train_task(run, partition, str(root))
    artifact = store.get(run.stage.name, result.key)
    if artifact is None:
        raise StageError(f"the rl artifact {result.key} disappeared from {root} right after the run")
    if result.cached:
        rename_run(f"{name} (cached)")
    else:  # published: the run directory has served its purpose
        shutil.rmtree(run.checkpoints, ignore_errors=True)
    logger.info("rl %s %s", result.key, "cached" if result.cached else "published")
    return {**report_rl(artifact, store.home), "cached": result.cached}

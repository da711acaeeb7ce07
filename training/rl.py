"""Stage `rl`: asynchronous RL (LongCat-Flash-Thinking-2601 "The DORA Asynchronous RL Framework" and "RL Training
Strategy"; LoongRL's GRPO settings) on the parts of ``training/async_rl/``.

The stage starts from a model artifact (an SFT checkpoint) or a local directory, trains on the RL tasks its other
inputs offer (``training.async_rl.sources``), and publishes the policy as a model artifact with every consumed or
dropped sample (``samples``: the staleness audit trail), every step's metrics (``steps``) and a summary.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import polars as pl

from data_contracts.stage import Artifact, Check, StageError, stage
from inference.checkpoint import MODEL_DIRECTORY
from inference.progress import RunProgress
from training.async_rl.config import RLParams
from training.records import RL_SAMPLE, RL_STEP, TRAINING_SUMMARY

STAGE = "rl"


def _trained_within_their_group(frame: pl.DataFrame) -> pl.Series:
    """A trained sample has an advantage and no drop reason; a dropped one the reverse."""
    return frame["trained"] != (frame["advantage"].is_not_null() & frame["drop_reason"].is_null())


def _within_admission_bound(frame: pl.DataFrame) -> pl.Series:
    """AReaL's inequality at admission, from the row alone: the sample's slot is within the bound of its version,
    and that bound is (S + version + 1) x one batch size for the whole run."""
    per_batch = frame["admission_limit"] / (frame["max_staleness"] + frame["admission_version"] + 1)
    batch = per_batch.drop_nulls().mode().min() if per_batch.drop_nulls().len() else None
    admitted = frame["admission_slot"].is_not_null()
    broken = ((frame["admission_slot"] > frame["admission_limit"]) | (per_batch != batch)
              | (frame["admission_slot"] < 1) | (frame["admission_version"] > frame["trainer_version"]))
    return (admitted & broken).fill_null(False)


def _within_staleness_bound(frame: pl.DataFrame) -> pl.Series:
    """The version gap at consumption: no trained sample is staler than the bound."""
    return frame["trained"] & (frame["staleness"] > frame["max_staleness"])


@stage(name=STAGE, version="2", inputs=("sft", "small_envs", "keychain"), params=RLParams, resources="gpu",
       kind="model", directory=MODEL_DIRECTORY,
       outputs={"samples": RL_SAMPLE.contract(checks=(
                    Check("trained_or_dropped", _trained_within_their_group,
                          description="a trained sample has an advantage and no drop reason"),
                    Check("admission_bound", _within_admission_bound,
                          description="admission_slot <= (max_staleness + admission_version + 1) x batch_size"),
                    Check("staleness_bound", _within_staleness_bound,
                          description="a trained sample's staleness is at most max_staleness"))),
                "steps": RL_STEP.contract(min_rows=1), "summary": TRAINING_SUMMARY.contract(min_rows=1)})
def rl(inputs: Mapping[str, Artifact], params: RLParams, partition: str, out_dir: Path) -> dict[str, pl.DataFrame]:
    """Asynchronous RL (GRPO/GSPO, streaming rollouts with bounded staleness) of a model on RL tasks."""
    from inference.checkpoint import equals_parent, read_card, save_model
    from inference.cpu import tune_allocator
    from inference.tokenizer import load as load_tokenizer
    from training.async_rl.controllers import DaskLauncher, ProcessLauncher
    from training.async_rl.run import RLRun
    from training.async_rl.sources import load_tasks
    from training.async_rl.tensorboard_steps import TensorBoardSteps

    tune_allocator()  # before torch allocates (inference/cpu.py)
    base_dir, base = _base(inputs, params)
    tasks = load_tasks({name: a for name, a in inputs.items() if a.manifest.get("kind") != "model"}, params.small_tools)
    run_dir = Path(params.output_dir) if params.output_dir else out_dir.parent / "run"
    if not params.resume:
        shutil.rmtree(run_dir, ignore_errors=True)
    launcher = DaskLauncher(_dask_client(params.dask_address)) if params.dask_address else ProcessLauncher()
    config = params.to_config()

    def on_step(row: dict[str, Any]) -> None:
        progress.update(row["version"], _figures(row))
        if report is not None:
            report(row)

    run = RLRun(base_dir, tasks, config, run_dir, engine=params.engine, launcher=launcher, on_step=on_step,
                resume=params.resume, device=params.device)
    report = (TensorBoardSteps(Path(params.logging_dir or run_dir / "tensorboard"))
              if params.report_to == "tensorboard" else None)
    with report or nullcontext(), RunProgress("rl", config.steps, completed=run.trainer.version) as progress:
        progress.update(figures={"status": "waiting for the first batch"}, log=False)  # a resumed run's ETA too
        result = run.run()
    steps = result.steps
    trained = int(result.samples["trained"].sum())
    if not params.allow_untrained and (not trained or equals_parent(result.model, base_dir)):
        raise StageError(_untrained(result.samples, config.steps, trained))
    summary = {"base": base, "steps": config.steps, "examples": trained, "final_loss": float(steps["loss"][-1])}
    data = {name: a.key for name, a in sorted(inputs.items()) if a.manifest.get("kind") != "model"}
    reward = float(steps.tail(min(3, steps.height))["reward_mean"].mean())
    save_model(result.model, load_tokenizer(base_dir), out_dir, {
        **summary, "method": "rl", "data": data, "metrics": {"reward": reward},
        "config": config.model_dump(mode="json")})
    card = read_card(out_dir)
    return {"samples": result.samples, "steps": steps,
            "summary": TRAINING_SUMMARY.frame([{**summary, "parameters": card["parameters"], "dtype": card["dtype"]}])}


def _figures(row: Mapping[str, Any]) -> dict[str, Any]:
    """A step's figures on the live line, in the log and the Prefect UI."""
    return {"reward": row["reward_mean"], "loss": row["loss"], "queue": row["queue_depth"],
            "staleness": row["staleness_mean"], "staleness max": row["staleness_max"],
            "samples/s": row["samples_per_s"]}


def _untrained(samples: pl.DataFrame, steps: int, trained: int) -> str:
    """Why a run trained nothing, from what it recorded: its samples and their drop reasons."""
    reasons = samples.filter(pl.col("drop_reason").is_not_null())["drop_reason"].value_counts(sort=True)
    dropped = ", ".join(f"{n} {reason}" for reason, n in reasons.iter_rows()) or "none"
    what = (f"no sample of {samples.height} carried a gradient in {steps} steps (dropped: {dropped})" if not trained
            else f"the model after {steps} steps equals its base ({trained} samples trained)")
    return (f"rl trained nothing: {what}; nothing was published. More steps, tasks the policy solves sometimes, or "
            "another learning rate can help; --allow-untrained (allow_untrained: true in the config) publishes it")


def _base(inputs: Mapping[str, Artifact], params: RLParams) -> tuple[Path, str]:
    """The base model's directory and description: the one model artifact input, or ``model_name_or_path``."""
    models = {name: a for name, a in inputs.items() if a.manifest.get("kind") == "model"}
    if len(models) + bool(params.model_name_or_path) != 1:
        raise StageError(f"rl takes exactly one base model: a model artifact input or model_name_or_path (got "
                         f"{sorted(models) + [params.model_name_or_path] if params.model_name_or_path else sorted(models)})")
    if models:
        (name, artifact), = models.items()
        return Path(artifact.directory), f"{name}/{artifact.key}"
    return Path(params.model_name_or_path), str(params.model_name_or_path)


def _dask_client(address: str) -> Any:
    from distributed import Client

    try:
        return Client(address, timeout="10s")
    except OSError as exc:
        raise StageError(f"no Dask scheduler at {address}: {exc}") from None

"""Asynchronous RL (LongCat-Flash-Thinking-2601 "The DORA Asynchronous RL Framework" and "RL Training Strategy";
LoongRL's GRPO settings): config, rollout manager and controllers, sample queue, losses, scheduling, weight sync and
trainer, one module each; this package declares the ``rl`` stage on them.

The stage starts from a model artifact (an SFT checkpoint) or a local directory, trains on the RL tasks its other
inputs offer (``training.rl.sources``), and publishes the policy as a model artifact with every consumed or dropped
sample (``samples``: the staleness audit trail), every step's metrics (``steps``) and a summary.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_contracts.schemas import RL_SAMPLE, RL_STEP, TRAINING_SUMMARY
from data_contracts.stage import Artifact, Check, StageError, stage
from inference.checkpoint import MODEL_DIRECTORY
from training.rl.config import RLParams

STAGE = "rl"


def _trained_within_their_group(frame: pl.DataFrame) -> pl.Series:
    """A trained sample has an advantage and no drop reason; a dropped one the reverse."""
    return frame["trained"] != (frame["advantage"].is_not_null() & frame["drop_reason"].is_null())


@stage(name=STAGE, version="1", inputs=("sft", "small_envs", "keychain"), params=RLParams, resources="gpu",
       kind="model", directory=MODEL_DIRECTORY,
       outputs={"samples": RL_SAMPLE.contract(checks=(
                    Check("trained_or_dropped", _trained_within_their_group,
                          description="a trained sample has an advantage and no drop reason"),)),
                "steps": RL_STEP.contract(min_rows=1), "summary": TRAINING_SUMMARY.contract(min_rows=1)})
def rl(inputs: Mapping[str, Artifact], params: RLParams, partition: str, out_dir: Path) -> dict[str, pl.DataFrame]:
    """Asynchronous RL (GRPO/GSPO, streaming rollouts with bounded staleness) of a model on RL tasks."""
    from inference.checkpoint import read_card, save_model
    from inference.cpu import tune_allocator
    from inference.tokenizer import load as load_tokenizer
    from training.rl.rollout import DaskLauncher, ProcessLauncher
    from training.rl.sources import load_tasks
    from training.rl.trainer import RLRun

    tune_allocator()  # before torch allocates (inference/cpu.py)
    base_dir, base = _base(inputs, params)
    tasks = load_tasks({name: a for name, a in inputs.items() if a.manifest.get("kind") != "model"})
    run_dir = Path(params.output_dir) if params.output_dir else out_dir.parent / "run"
    if not params.resume:
        shutil.rmtree(run_dir, ignore_errors=True)
    launcher = DaskLauncher(_dask_client(params.dask_address)) if params.dask_address else ProcessLauncher()
    config = params.to_config()
    progress = _StepProgress(config.steps)
    with progress.bar:
        run = RLRun(base_dir, tasks, config, run_dir, engine=params.engine, launcher=launcher,
                    on_step=progress.update, resume=params.resume, device=params.device)
        progress.start_at(run.trainer.version)
        result = run.run()
    steps = result.steps
    summary = {"base": base, "steps": config.steps, "examples": int(result.samples["trained"].sum()),
               "final_loss": float(steps["loss"][-1])}
    save_model(result.model, load_tokenizer(base_dir), out_dir, {**summary, "method": "rl",
                                                                 "config": config.model_dump(mode="json")})
    card = read_card(out_dir)
    return {"samples": result.samples, "steps": steps,
            "summary": TRAINING_SUMMARY.frame([{**summary, "parameters": card["parameters"], "dtype": card["dtype"]}])}


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


class _StepProgress:
    """A live line per run: version, reward, queue depth, staleness, samples/s (on a terminal only)."""

    def __init__(self, steps: int) -> None:
        import os

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("rl"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                            TimeElapsedColumn(), disable=not os.isatty(2))
        self.task = self.bar.add_task("rl", total=steps, status="waiting for the first batch")

    def start_at(self, version: int) -> None:
        self.bar.update(self.task, completed=version)

    def update(self, row: Mapping[str, Any]) -> None:
        status = (f"v{row['version']} reward {row['reward_mean']:.3f} queue {row['queue_depth']} "
                  f"staleness {row['staleness_mean']:.2f} ({row['staleness_max']} max) "
                  f"{row['samples_per_s']:.2f} samples/s")
        self.bar.update(self.task, completed=row["version"], status=status)

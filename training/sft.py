"""Stage `sft`: cold-start supervised fine-tuning with TRL's ``SFTTrainer`` (LongCat-Flash-Thinking-2601, "Cold-Start
Policy Initialization"), published as a model artifact.

Inputs are resolved per run (``Stage.with_inputs``): one or more trajectory artifacts (``sft_set``, ``small_envs``, any
artifact with a ``trajectory`` output) and, optionally, the base model as a model artifact; a local transformers
directory as base is ``model_name_or_path`` instead (its content enters the artifact key). The examples are the
trajectories tokenized with the base model's chat template and tools, loss on the assistant turns whose ``train``
flag is set (``training/sft_data.py``), minus an eval split held out by lineage, on which loss and tool-call
validity (``training/sft_eval.py``) are measured before the first step and at the end.

With ``lora`` set, the base stays frozen and low-rank adapters (``peft``, TRL's ``peft_config``) train on the
projections of its top layers only, so the backward pass stops there; the trained adapter is merged into the published
weights (every engine serves them as any checkpoint) and kept beside them under ``adapter/``. The output layer is
evaluated at the trained positions only (TRL's fused LM head, made to on every device: ``trained_positions_only``),
whatever the adapter, and the frozen layers' output below the adapters is kept per training input for later epochs
(``frozen_outputs_mb``, ``training.adapters.keep_frozen_outputs``).

Config fields carry TRL's names. CPU (``use_cpu``; fp32, or ``bf16`` autocast where the cores have bf16 units) and
GPU (``bf16``, ``gradient_checkpointing``, several processes through ``accelerate launch`` with ``num_processes``)
differ by config alone. Checkpoints go every
``save_steps`` to ``output_dir`` (the flow puts it under the data root, keyed by the artifact key); a checkpoint
counts only once the trainer has written all of it (a marker file written after the save callback), so a run killed
while saving resumes from the one before (prime-rl #1712: resume crashed on a half-written checkpoint). Resuming
restores optimizer, scheduler, RNG states and the data position (the trainer skips the batches already seen).
Nothing is published until the run ends: the runner moves the finished directory into place.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import Field, field_validator, model_validator

from data_contracts.stage import REJECTED, Artifact, Params, StageError, stage
from data_contracts.store import code_version
from inference.checkpoint import MODEL_DIRECTORY, equals_parent, read_card, save_model
from inference.cpu import native_bf16, tune_allocator
from inference.plotting import save_figure
from inference.progress import RunProgress
from training.adapters import ADAPTER, LoraSettings, adapter_card, keep_frozen_outputs, merge_adapter
from training.records import SFT_REJECTED, TRAINING_METRIC, TRAINING_SUMMARY
from training.sft_data import (
    AUTO,
    GYMFORGE,
    KEEP,
    Example,
    TemplateChoice,
    apply_template,
    build_examples,
    choose_template,
    in_eval_split,
    read_trajectories,
)
from training.sft_eval import CallTurn, call_turns, change_interval, mean_figures, score_turns

STAGE = "sft"
REPORT_PACKAGES = {"azure_ml": "azureml"}  # report_to name -> the package it needs, where they differ
COMPLETE = "gymforge_checkpoint_complete"  # written into a checkpoint directory once the trainer saved all of it
log = logging.getLogger("gymforge.sft")


class SFTParams(Params):
    """The SFT config: TRL's ``SFTConfig`` names and meanings (defaults of our own where TRL's are wrong here)."""

    model_name_or_path: str | None = Field(
        None, description="a local transformers directory to start from; None when the base is a model artifact "
        "input (one of the two is required)")
    chat_template: str = Field(AUTO, description="the chat template to train with: auto (the base's own when it "
                               "marks assistant turns with {% generation %}, else TRL's training variant of it, else "
                               "gymforge's ChatML template with tool calls), keep (the base's own or an error), "
                               "gymforge, or a path to a Jinja template file")
    # data
    max_length: int = Field(4096, gt=0, description="longest example in tokens; longer trajectories are set aside "
                                                    "as too_long (never cut)")
    eval_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="share of trajectories held out (by lineage) "
                                                                  "for eval loss and tool-call validity")
    packing: bool = Field(False, description="pack examples into max_length rows (best-fit decreasing, "
                                             "padding-free); on CPU the attention over whole packed rows costs more "
                                             "than the padding it saves (bench/RESULTS.md, bench_sft)")
    packing_strategy: Literal["bfd", "wrapped"] = Field("bfd", description="TRL's packing strategy")
    padding_free: bool = Field(False, description="flatten each batch into one row with position ids")
    train_sampling_strategy: Literal["random", "group_by_length"] = Field(
        "group_by_length", description="group batches of similar length (less padding without packing) or random")
    lora: LoraSettings | None = Field(None, description="train low-rank adapters on a frozen base and merge them "
                                      "into the published weights (None: train every weight)")
    frozen_outputs_mb: int = Field(512, ge=0, exclude=True, description="with lora, keep the output of the frozen "
                                   "layers below the adapters for each training input, up to this many MiB, so later "
                                   "epochs run only the adapted layers (0: off; the same weights either way)")
    # optimisation
    num_train_epochs: float = Field(3.0, gt=0, description="epochs over the training examples (when max_steps<0)")
    max_steps: int = Field(-1, description="optimizer steps; -1 runs num_train_epochs")
    per_device_train_batch_size: int = Field(2, gt=0, description="examples per device per step")
    per_device_eval_batch_size: int = Field(2, gt=0, description="examples per device per eval batch")
    gradient_accumulation_steps: int = Field(1, gt=0, description="micro-batches per optimizer step")
    learning_rate: float = Field(2e-5, gt=0, description="peak AdamW learning rate (TRL's default)")
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        "cosine", description="learning-rate schedule after warmup")
    warmup_steps: float = Field(0.05, ge=0, description="linear warmup: steps, or a share of all steps when < 1")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    seed: int = Field(0, description="initialisation of the trainer's RNGs and the data order")
    # checkpoints, logs, evaluation
    save_steps: int = Field(50, gt=0, description="a resumable checkpoint every this many steps")
    save_total_limit: int = Field(2, gt=0, description="checkpoints kept (older ones are deleted)")
    logging_steps: int = Field(5, gt=0, description="training figures logged every this many steps")
    eval_steps: int | None = Field(None, gt=0, description="evaluate every this many steps too (None: before "
                                                           "the first step and at the end only)")
    eval_tool_calls: int = Field(32, ge=0, description="held-out tool-calling turns scored for validity per "
                                                       "evaluation (greedy decoding)")
    eval_max_tokens: int = Field(160, gt=0, description="tokens a held-out turn may write before its call is "
                                 "scored (decoding stops at the first call's end)")
    report_to: list[str] = Field(default_factory=list, exclude=True, description="where TRL also reports the "
                                 "training figures, as TRL's report_to (tensorboard, wandb, mlflow...; the flow puts "
                                 "TensorBoard's files under <data root>/tensorboard/sft/<key>); none by default")
    logging_dir: str | None = Field(None, exclude=True, description="TensorBoard's directory (default: "
                                                                     "<output_dir>/runs)")
    allow_untrained: bool = Field(False, exclude=True, description="publish a model that training left equal to "
                                  "its base (otherwise that run is an error)")
    # devices
    use_cpu: bool = Field(False, description="train on the CPU even when an accelerator is present")
    bf16: bool = Field(False, description="bf16 autocast mixed precision, and the held-out turns decoded by a bf16 "
                                          "copy: GPUs, and CPUs with bf16 units (the small profile; measured in "
                                          "bench/RESULTS.md; on a CPU without them the run says so and trains in "
                                          "float32); off by default")
    gradient_checkpointing: bool = Field(False, description="recompute activations in the backward pass (GPU "
                                                            "memory); TRL's default True only slows a CPU down")
    num_processes: int = Field(1, gt=0, description="data-parallel processes; above 1 training runs under "
                                                    "`accelerate launch` (multi-GPU)")
    # where this run keeps its checkpoints: not part of what the model is, so not part of its artifact key
    output_dir: str | None = Field(None, exclude=True, description="checkpoint directory (default: the stage's "
                                                                    "scratch space, gone with it)")
    resume_from_checkpoint: bool = Field(False, exclude=True, description="continue from the last complete "
                                                                          "checkpoint in output_dir")

    @field_validator("report_to", mode="before")
    @classmethod
    def _integrations(cls, value: Any) -> list[str]:
        import importlib.util

        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        names = [value] if isinstance(value, str) else list(value or [])
        if names in (["none"], []):
            return []
        unknown = sorted(set(names) - set(INTEGRATION_TO_CALLBACK))
        if unknown:
            raise ValueError(f"unknown integration {', '.join(unknown)}; TRL reports to "
                             f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}")
        missing = [name for name in names if importlib.util.find_spec(REPORT_PACKAGES.get(name, name)) is None]
        if missing:
            raise ValueError(f"report_to {', '.join(missing)} needs its package installed: pip install "
                             f"{' '.join(REPORT_PACKAGES.get(name, name) for name in missing)}")
        return names

    @model_validator(mode="after")
    def _consistent(self) -> SFTParams:
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(f"max_steps={self.max_steps}: set a positive number of steps, or -1 to run "
                             "num_train_epochs")
        if self.packing and self.padding_free is False and self.packing_strategy == "wrapped":
            raise ValueError("packing_strategy='wrapped' cuts conversations mid-turn; use 'bfd'")
        return self

    def local_inputs(self) -> list[str]:
        template = [self.chat_template] if self.chat_template not in (AUTO, KEEP, GYMFORGE) else []
        return ([self.model_name_or_path] if self.model_name_or_path else []) + template


# --- inputs ----------------------------------------------------------------------------------------------------


def split_inputs(inputs: Mapping[str, Artifact], params: SFTParams) -> tuple[Path, str, dict[str, Artifact]]:
    """``(base directory, base description, data artifacts)``: a model artifact input is the base, every other
    input is data; exactly one base, from an input or ``model_name_or_path``."""
    models = {name: a for name, a in inputs.items() if a.manifest.get("kind") == "model"}
    data = {name: a for name, a in inputs.items() if name not in models}
    if len(models) > 1 or (models and params.model_name_or_path):
        raise StageError(f"sft takes one base model; got {sorted(models)}"
                         + (f" and model_name_or_path={params.model_name_or_path}" if params.model_name_or_path else ""))
    if not data:
        raise StageError("sft needs at least one trajectory artifact to train on")
    if models:
        (name, artifact), = models.items()
        return Path(artifact.directory), f"{name}/{artifact.key}", data
    if not params.model_name_or_path:
        raise StageError("sft needs a base model: a model artifact input or model_name_or_path")
    return Path(params.model_name_or_path), params.model_name_or_path, data


def load_base(path: Path, chat_template: str = AUTO) -> tuple[Any, Any, TemplateChoice]:
    """The base model, its tokenizer with the chat template training uses (``choose_template``), and that choice;
    a StageError names a directory that does not load or a template that cannot mask assistant turns."""
    import torch
    from transformers import AutoModelForCausalLM

    from inference.tokenizer import load

    if not (path / "config.json").is_file():
        raise StageError(f"base model {path}: not a transformers checkpoint directory (no config.json)")
    try:
        tokenizer = load(path)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever transformers raises, the user needs the directory named
        raise StageError(f"base model {path} does not load with transformers: {type(exc).__name__}: {exc}") from None
    choice = choose_template(tokenizer, chat_template, f"base model {path}")
    apply_template(model, tokenizer, choice)
    return model, tokenizer, choice


# --- checkpoints -----------------------------------------------------------------------------------------------


def complete_checkpoints(directory: Path) -> list[Path]:
    """The checkpoints the trainer finished writing, oldest first."""
    found = [p for p in directory.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and (p / COMPLETE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def prepare_checkpoints(directory: Path, resume: bool) -> Path | None:
    """The checkpoint to resume from (None: start afresh). Half-written checkpoints are dropped, and without
    ``resume`` every earlier checkpoint is too (a fresh run never mixes with a killed one's files)."""
    directory.mkdir(parents=True, exist_ok=True)
    complete = set(complete_checkpoints(directory)) if resume else set()
    for path in directory.glob("checkpoint-*"):
        if path not in complete:
            shutil.rmtree(path, ignore_errors=True)
    return complete_checkpoints(directory)[-1] if complete else None


# --- the trainer ---------------------------------------------------------------------------------------------------


def sft_config(params: SFTParams, output_dir: Path, evaluate: bool, resuming: bool) -> Any:
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(output_dir), seed=params.seed, data_seed=params.seed,
        max_length=params.max_length, packing=params.packing, packing_strategy=params.packing_strategy,
        padding_free=params.padding_free, train_sampling_strategy=params.train_sampling_strategy,
        assistant_only_loss=True,  # the masks come with the examples (training/sft_data.py); TRL checks the rest
        num_train_epochs=params.num_train_epochs, max_steps=params.max_steps,
        per_device_train_batch_size=params.per_device_train_batch_size,
        per_device_eval_batch_size=params.per_device_eval_batch_size,
        gradient_accumulation_steps=params.gradient_accumulation_steps,
        learning_rate=params.learning_rate, lr_scheduler_type=params.lr_scheduler_type,
        warmup_steps=params.warmup_steps, weight_decay=params.weight_decay, max_grad_norm=params.max_grad_norm,
        use_cpu=params.use_cpu, bf16=params.bf16, fp16=False,
        activation_checkpointing=params.gradient_checkpointing,  # transformers' new name; TRL users know the old
        save_strategy="steps", save_steps=params.save_steps, save_total_limit=params.save_total_limit,
        logging_strategy="steps", logging_steps=params.logging_steps, logging_first_step=True,
        eval_strategy="steps" if evaluate and params.eval_steps else "no", eval_steps=params.eval_steps,
        eval_on_start=evaluate and not resuming,  # a resumed run keeps the evaluation its first start made
        include_num_input_tokens_seen="non_padding", dataloader_num_workers=0,
        report_to=params.report_to or "none", disable_tqdm=True, save_only_model=False,
    )


@contextmanager
def trained_positions_only() -> Iterator[None]:
    """Within this block TRL's fused LM head projects only the positions whose label is trained, on every device.

    TRL does so where Triton runs and projects every position elsewhere (a tile shape per batch would recompile on
    Neuron). A CPU recompiles nothing, and there the 49K-wide projection of the untrained positions (system prompt,
    tools, user and tool turns: most of a trajectory), in float32, is a large share of a step (bench_sft steps)."""
    import trl.trainer.utils as fused

    everywhere = fused._use_triton
    fused._use_triton = lambda device: device.type == "cpu" or everywhere(device)
    try:
        yield
    finally:
        fused._use_triton = everywhere


def _trainer_class() -> type:
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices
    from trl import SFTTrainer

    class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
        """transformers' length-grouped order, drawn from the seed and the epoch alone. Its own draws from the
        global RNG at each epoch's start, so a run resumed in a later epoch (a fresh process, whose RNG state is
        restored only after that draw) shuffled the epoch differently and trained other batches."""

        def __init__(self, *args: Any, seed: int, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.seed, self.epoch = seed, 0

        def set_epoch(self, epoch: int) -> None:  # the trainer calls it before every epoch, a resumed one too
            self.epoch = epoch

        def __iter__(self) -> Any:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))

    class GymforgeSFTTrainer(SFTTrainer):
        """TRL's trainer whose evaluation also scores tool-call validity on held-out turns, and whose data order is
        a function of (seed, epoch), so a resumed run trains exactly the batches an uninterrupted one does."""

        eval_turns: Sequence[CallTurn] = ()
        eval_max_tokens = 160  # SFTParams.eval_max_tokens
        eval_dtype: str | None = None  # bfloat16 with SFTParams.bf16: held-out turns decoded by a bf16 copy
        head_at_trained_positions = True  # bench_sft throughput turns it off to measure what it saves
        frozen_outputs: dict[str, int] | None = None  # keep_frozen_outputs' record (hits, bytes) where it runs
        first_scores: list[dict[str, bool]] | None = None  # each held-out turn at the first evaluation

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            sampler = super()._get_train_sampler(train_dataset)
            if type(sampler) is LengthGroupedSampler:
                return EpochSeededLengthGroupedSampler(sampler.batch_size, lengths=sampler.lengths,
                                                       seed=self.args.data_seed or self.args.seed)
            return sampler

        def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
            if not self.head_at_trained_positions:
                return super().compute_loss(*args, **kwargs)
            with trained_positions_only():
                return super().compute_loss(*args, **kwargs)

        def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
            metrics = super().evaluate(*args, **kwargs)
            if self.eval_turns:
                scores = score_turns(self.model, self.processing_class, self.eval_turns,
                                     max_new_tokens=self.eval_max_tokens, dtype=self.eval_dtype)
                figures = {f"eval_{k}": v for k, v in mean_figures(scores).items()}
                if self.first_scores is None:
                    self.first_scores = scores
                else:  # the change since the first evaluation, with its interval (a learning claim)
                    change = change_interval(self.first_scores, scores, self.eval_turns)
                    figures.update({f"eval_tool_call_valid_{k}": v for k, v in change.items()})
                self.log(figures)
                metrics.update(figures)
            return metrics

    return GymforgeSFTTrainer


LOG_NAMES = {"loss": "loss", "grad_norm": "grad_norm", "learning_rate": "lr", "epoch": "epoch"}
"""The training figures of a progress line (TRL logs more: entropy, token accuracy, counts)."""
NOT_FIGURES = {"eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "eval_num_tokens"}
"""Evaluation log entries that are run-time statistics or counts, not held-out figures."""


def _callbacks(progress: bool) -> list[Any]:
    from transformers import TrainerCallback

    class MarkComplete(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                (Path(args.output_dir) / f"checkpoint-{state.global_step}" / COMPLETE).touch()

    class Report(TrainerCallback):
        """Step, loss, tokens/s and ETA (inference/progress.py): a live bar on a terminal, a line per logging
        step (and per evaluation) for the log and the Prefect UI."""

        def __init__(self) -> None:
            self.progress: RunProgress | None = None
            self.loss = float("nan")
            self.start = (0.0, 0)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                self.start = (time.perf_counter(), state.num_input_tokens_seen)
                self.progress = RunProgress("sft", state.max_steps, completed=state.global_step,
                                            bar=None if progress else False)

        def tokens_per_s(self, state: Any) -> float:
            seconds, tokens = self.start
            return (state.num_input_tokens_seen - tokens) / max(time.perf_counter() - seconds, 1e-9)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            logs = logs or {}
            if self.progress is None or not ({"loss", "eval_loss"} & set(logs)):
                return
            self.loss = logs.get("loss", self.loss)
            figures = {LOG_NAMES.get(name, name): value for name, value in logs.items()
                       if name in LOG_NAMES or (name.startswith("eval_") and name not in NOT_FIGURES)}
            if "loss" in logs:
                figures["tokens/s"] = self.tokens_per_s(state)
            self.progress.update(state.global_step, figures)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.progress is not None:
                self.progress.update(state.global_step, {"loss": self.loss, "tokens/s": self.tokens_per_s(state)},
                                     log=False)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.progress is not None:
                self.progress.close()

    return [MarkComplete(), Report()]


def make_trainer(model: Any, tokenizer: Any, train_rows: list[dict], eval_rows: list[dict],
                 eval_turns: Sequence[CallTurn], params: SFTParams, output_dir: Path, resuming: bool = False,
                 progress: bool = True) -> Any:
    """The configured ``SFTTrainer`` over tokenized rows (``Example.row``), evaluating on ``eval_rows`` (loss) and
    ``eval_turns`` (tool-call validity) when there are any."""
    from datasets import Dataset
    from transformers import PrinterCallback
    from transformers.integrations import TensorBoardCallback

    evaluate = bool(eval_rows)
    trainer = _trainer_class()(
        model=model, args=sft_config(params, output_dir, evaluate, resuming),
        train_dataset=Dataset.from_list(train_rows), eval_dataset=Dataset.from_list(eval_rows) if evaluate else None,
        processing_class=tokenizer, callbacks=_callbacks(progress),
        peft_config=params.lora.config(model.config.num_hidden_layers) if params.lora else None,
    )
    trainer.remove_callback(PrinterCallback)  # its dict of stringified logs: the Report callback says it better
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and params.logging_dir:  # transformers 5 has no logging_dir arg
            callback.logging_dir = params.logging_dir
    trainer.eval_turns = tuple(eval_turns)
    trainer.eval_max_tokens = params.eval_max_tokens
    trainer.eval_dtype = "bfloat16" if params.bf16 else None
    if params.lora and params.frozen_outputs_mb and not params.gradient_checkpointing:
        trainer.frozen_outputs = keep_frozen_outputs(trainer.model, params.frozen_outputs_mb << 20)
    return trainer


def fit(model: Any, tokenizer: Any, train_rows: list[dict], eval_rows: list[dict], eval_turns: Sequence[CallTurn],
        params: SFTParams, output_dir: Path, resume_from: Path | None, progress: bool = True
        ) -> tuple[Any, list[dict[str, Any]]]:
    """Train ``model`` with TRL (checkpoints in ``output_dir``, resuming from ``resume_from`` when given) and return
    it with the trainer's log history; evaluates before the first step (unless resuming) and at the end when there
    is an eval split."""
    evaluate = bool(eval_rows)
    trainer = make_trainer(model, tokenizer, train_rows, eval_rows, eval_turns, params, output_dir,
                           resume_from is not None, progress)
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    last = trainer.state.global_step
    if evaluate and not any(e.get("step") == last and "eval_loss" in e for e in trainer.state.log_history):
        trainer.evaluate()  # unless eval_steps evaluated the last step already (a held-out scoring is minutes)
    return trainer.model, list(trainer.state.log_history)


def _launch(spec: dict[str, Any], output_dir: Path, processes: int, cpu: bool) -> tuple[Any, list[dict[str, Any]]]:
    """Run :func:`fit` in ``processes`` processes under ``accelerate launch``; process 0 writes the trained model
    and the log history, which are read back here."""
    from transformers import AutoModelForCausalLM

    spec_path = output_dir / "launch.json"
    spec_path.write_text(json.dumps(spec))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(processes),
               *(["--cpu"] if cpu else []), "-m", "training.sft_launch", str(spec_path)]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`accelerate launch` of the SFT run exited with {done.returncode}")
    final = output_dir / "final"
    history = json.loads((final / "log_history.json").read_text())
    return AutoModelForCausalLM.from_pretrained(str(final), local_files_only=True), history  # merged (sft_launch)


# --- figures ---------------------------------------------------------------------------------------------------------

_RUNTIME_STATS = ("runtime", "per_second", "total_flos", "epoch", "train_loss", "num_input_tokens_seen", "num_tokens")


def metrics_frame(history: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """The trainer's log history in the ``training_metric`` record (train and eval figures; run-time statistics and
    token counts left out), the last value of a repeated (step, split, name)."""
    rows: dict[tuple[int, str, str], float] = {}
    for entry in history:
        step = int(entry.get("step", 0))
        for name, value in entry.items():
            if name == "step" or not isinstance(value, int | float) or any(s in name for s in _RUNTIME_STATS):
                continue
            split, short = ("eval", name.removeprefix("eval_")) if name.startswith("eval_") else ("train", name)
            rows[(step, split, short)] = float(value)
    return TRAINING_METRIC.frame([{"step": s, "split": sp, "name": n, "value": v}
                                  for (s, sp, n), v in sorted(rows.items())])


def final_eval(metrics: pl.DataFrame) -> dict[str, float]:
    """The last evaluation's figures (loss and tool-call validity)."""
    return _eval_at(metrics, last=True)


def first_eval(metrics: pl.DataFrame) -> dict[str, float]:
    """The first evaluation's figures (before the first step, unless the run was resumed)."""
    return _eval_at(metrics, last=False)


def _eval_at(metrics: pl.DataFrame, last: bool) -> dict[str, float]:
    evals = metrics.filter(pl.col("split") == "eval")
    if evals.is_empty():
        return {}
    chosen = evals.filter(pl.col("step") == (evals["step"].max() if last else evals["step"].min()))
    return dict(zip(chosen["name"], chosen["value"], strict=True))


# --- the stage -------------------------------------------------------------------------------------------------------


# 2: a base directory whose tokenizer lacks the tool tags keeps spelling them in its own pieces
# 3: a checkpoint given gymforge's template carries its response template (TRL parses tool calls with it)
# 4: low-rank adapters (lora) merged into the published weights, the adapter kept under adapter/
def loss_figure(artifact: Artifact, path: Path) -> None:
    """The figure of an sft artifact: training and held-out loss against the step."""
    metrics = artifact.read("metrics")
    with save_figure(path, figsize=(6, 3.5)) as (_, ax):
        for split, colour in (("train", "#4477aa"), ("eval", "#ee6677")):
            curve = metrics.filter((pl.col("split") == split) & (pl.col("name") == "loss")).sort("step")
            if not curve.is_empty():
                ax.plot(curve["step"].to_list(), curve["value"].to_list(), marker="o" if split == "eval" else None,
                        color=colour, label=f"{split} loss")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (trained assistant tokens)")
        ax.set_title(f"{STAGE} {artifact.key}")
        ax.legend()


@stage(name=STAGE, version="4", inputs=("small_envs",), params=SFTParams, resources="gpu", kind="model",
       directory=MODEL_DIRECTORY, figure=loss_figure,
       outputs={"metrics": TRAINING_METRIC.contract(min_rows=1), "summary": TRAINING_SUMMARY.contract(min_rows=1),
                REJECTED: SFT_REJECTED.contract()})
def sft(inputs: Mapping[str, Artifact], params: SFTParams, partition: str, out_dir: Path) -> dict[str, pl.DataFrame]:
    """Cold-start SFT of a base model on trajectory artifacts (TRL SFTTrainer, assistant turns by train flag)."""
    tune_allocator()  # before torch allocates (inference/cpu.py)
    if params.bf16 and not native_bf16(params.use_cpu):
        log.warning("sft: bf16 off: this CPU has no bf16 matrix path, where bf16 autocast is tens of times slower "
                    "than float32; training and held-out decoding run in float32 (the card says so)")
        params = params.model_copy(update={"bf16": False})
    base_dir, base, data = split_inputs(inputs, params)
    model, tokenizer, template = load_base(base_dir, params.chat_template)
    if template.template is not None:
        log.info("%s: %s", base, template.reason)
    examples, rejected = build_examples(read_trajectories(data), tokenizer, params.max_length)
    train: list[tuple[Example, dict]] = []
    held: list[tuple[Example, dict]] = []
    for example, row in examples:
        (held if in_eval_split(row, params.eval_fraction, params.seed) else train).append((example, row))
    if not train:
        raise StageError(f"sft: no trajectory left to train on ({rejected.height} set aside: "
                         f"{dict(rejected['reason'].value_counts().iter_rows())}; {len(held)} held out)")
    train_rows = [e.row(json.loads(r["messages"])) for e, r in train]
    eval_rows = [e.row(json.loads(r["messages"])) for e, r in held]
    eval_turns = call_turns([r for _, r in held], params.eval_tool_calls)
    output_dir = Path(params.output_dir) if params.output_dir else out_dir.parent / "trainer"
    resume_from = prepare_checkpoints(output_dir, params.resume_from_checkpoint)
    if params.resume_from_checkpoint:
        log.info("resuming from %s", resume_from or "nothing (no complete checkpoint): starting afresh")
    if params.num_processes > 1:
        spec = {"params": {**params.model_dump(mode="json"), "report_to": params.report_to,
                           "logging_dir": params.logging_dir}, "output_dir": str(output_dir),
                "resume_from": str(resume_from) if resume_from else None, "base_dir": str(base_dir),
                "train_rows": train_rows, "eval_rows": eval_rows,
                "eval_turns": [dataclasses.asdict(t) for t in eval_turns]}
        model, history = _launch(spec, output_dir, params.num_processes, params.use_cpu)
        if (output_dir / "final" / ADAPTER).is_dir():
            shutil.copytree(output_dir / "final" / ADAPTER, out_dir / ADAPTER)
    else:
        model, history = fit(model, tokenizer, train_rows, eval_rows, eval_turns, params, output_dir, resume_from)
        model = merge_adapter(model, out_dir / ADAPTER)
    metrics = metrics_frame(history)
    steps = int(metrics["step"].max()) if not metrics.is_empty() else 0
    if not params.allow_untrained and equals_parent(model, base_dir):
        raise StageError(f"sft trained nothing: after {steps} steps on {len(train)} examples the model equals its base "
                         f"{base} (no gradient reached the weights); nothing was published (--allow-untrained, or "
                         "allow_untrained: true in the config, publishes it)")
    losses = metrics.filter((pl.col("split") == "train") & (pl.col("name") == "loss")).sort("step")["value"]
    card = {"method": STAGE, "base": base, "data": {name: a.key for name, a in sorted(data.items())},
            "config": params.model_dump(mode="json"), "steps": steps, "examples": len(train),
            "eval_examples": len(held), "metrics": final_eval(metrics), "metrics_before": first_eval(metrics),
            "chat_template": template.card(), "code_version": dict(code_version()),
            "adapter": adapter_card(out_dir / ADAPTER),
            "resumed_from_step": int(resume_from.name.split("-")[-1]) if resume_from else None}
    save_model(model, tokenizer, out_dir, card)
    saved = read_card(out_dir)
    summary = {"base": base, "steps": steps, "examples": len(train),
               "final_loss": float(losses[-1]) if len(losses) else float("nan"),
               "parameters": saved["parameters"], "dtype": saved["dtype"]}
    return {"metrics": metrics, "summary": TRAINING_SUMMARY.frame([summary]), REJECTED: rejected}

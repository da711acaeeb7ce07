"""One RL run (LongCat-Flash-Thinking-2601, "The DORA Asynchronous RL Framework"): ``RLRun`` wires the parts. A
Scheduler picks groups, the RolloutManager streams them through controllers into the SampleQueue, the trainer
(``training/async_rl/trainer.py``) steps whenever a batch is ready and publishes each new version through
``FileWeightSync``. Every step can be checkpointed whole (model, optimizer, LR schedule, RNG, version, counters, the
queue's complete groups, the scheduler's history and curriculum state); a resumed run continues the staleness bound
and counters where they were, and drops weight versions the killed run published past its last checkpoint.
"""


from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import torch

from data_contracts.files import atomic_file
from data_contracts.stage import StageError
from inference.engine_spec import hf_spec
from training.adapters import merge_adapter, merged_state_dict
from training.async_rl.config import RLConfig
from training.async_rl.controllers import ControllerSpec, EnvFactory, Launcher, RolloutManager, default_env
from training.async_rl.queue import Sample, SampleQueue
from training.async_rl.scheduling import RLTask, Scheduler
from training.async_rl.trainer import PolicyTrainer
from training.async_rl.weights import FileWeightSync
from training.records import RL_SAMPLE, RL_STEP

UNWRITTEN_LIMIT = 4
"""Batches of samples without a single generated token after which a run stops: its tasks cannot be learned."""


class RLRunError(StageError):
    """The run cannot go on (every controller keeps dying, a checkpoint does not match the run, no sample reaches
    the policy): one line for the user, not a traceback."""


# --- checkpoints on disk -------------------------------------------------------------------------------------------


class Checkpoints:
    """Whole-run checkpoints ``v<version>.pt`` under a directory: each written to a temporary file and renamed, then
    the ``latest`` pointer replaced, so a kill at any moment leaves the previous checkpoint usable."""

    LATEST = "latest"

    def __init__(self, directory: Path, keep: int = 2) -> None:
        self.directory = directory
        self.keep = keep
        directory.mkdir(parents=True, exist_ok=True)

    def save(self, state: dict[str, Any], version: int) -> None:
        final = self.directory / f"v{version:06d}.pt"
        with atomic_file(final) as partial:
            torch.save(state, partial)
        with atomic_file(self.directory / self.LATEST) as pointer:
            pointer.write_text(final.name)
        for old in sorted(self.directory.glob("v*.pt"))[: -self.keep]:
            old.unlink(missing_ok=True)

    def latest(self) -> dict[str, Any] | None:
        try:
            name = (self.directory / self.LATEST).read_text().strip()
        except FileNotFoundError:
            return None
        return torch.load(self.directory / name, weights_only=False)  # our own file: it holds queued samples


# --- the run -------------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    model: Any
    samples: pl.DataFrame  # RL_SAMPLE rows: every sample consumed or dropped
    steps: pl.DataFrame  # RL_STEP rows: one per optimizer step
    events: dict[str, int]  # controller restarts, requeued samples, drops by reason
    resumed_from: int | None


StepCallback = Callable[[dict[str, Any]], None]


@dataclass
class RLRun:
    """One RL run under ``run_dir`` (weights for the engines, checkpoints): build it, then ``run()``."""

    model_dir: Path
    tasks: Sequence[RLTask]
    config: RLConfig
    run_dir: Path
    engine: str | Any | None = None  # default: hf:<model_dir> in every controller
    launcher: Launcher | None = None
    make_env: EnvFactory = default_env
    on_step: StepCallback | None = None
    resume: bool = True
    device: str | None = None  # default: cuda when present

    def __post_init__(self) -> None:
        from transformers import AutoModelForCausalLM

        from inference.tokenizer import load as load_tokenizer

        if not self.tasks:
            raise RLRunError("no tasks to train on: the task artifacts hold no rows")
        torch.manual_seed(self.config.seed)
        self.tokenizer = load_tokenizer(self.model_dir)
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), local_files_only=True,
                                                     dtype=getattr(torch, self.config.dtype)).to(device).eval()
        if self.config.lora is not None:
            model = self.config.lora.wrap(model)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.trainer = PolicyTrainer(model, self.config, pad)
        self.kinds = {task.task_id: task.kind for task in self.tasks}
        self.weights = FileWeightSync(self.run_dir / "weights")
        self.checkpoints = Checkpoints(self.run_dir / "checkpoints")
        self.scheduler = Scheduler(self.tasks, self.config.scheduling, self.config.steps, seed=self.config.seed)
        self.queue = SampleQueue(self.config.num_generations, self.config.max_staleness, on_drop=self._dropped)
        spec = ControllerSpec(self.engine or hf_spec(self.model_dir), str(self.weights.directory), self.config,
                              self.make_env)
        self.manager = RolloutManager(self.config, self.scheduler, self.queue, spec, self.launcher,
                                      on_group=self._group_done)
        self.sample_rows: list[dict[str, Any]] = []
        self.step_rows: list[dict[str, Any]] = []
        self.consumed = 0  # accepted samples the trainer took (trained or reported as carrying no gradient)
        self.unwritten: Counter[str] = Counter()  # consumed samples the policy wrote no token of, by stop reason
        self.elapsed_before = 0.0  # run time before a resume, so samples/s continues
        self.resumed_from = self._restore() if self.resume else None

    # -- callbacks from the manager's thread and the queue --------------------------------------------------------

    def _group_done(self, task: RLTask, samples: Sequence[Sample]) -> None:
        if any(s.drop_reason for s in samples):
            return  # pass rates count completed groups only
        self.scheduler.record_group(task, [s.reward for s in samples], [_answer(s) for s in samples])
        self.kinds.setdefault(task.task_id, task.kind)

    def _dropped(self, sample: Sample, reason: str, version: int) -> None:
        if not sample.drop_reason:
            self.manager.released += 1  # its place under the admission bound is free again
        self.sample_rows.append(_sample_row(sample, version, None, reason, self.config.max_staleness))

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        config, trainer = self.config, self.trainer
        started = time.monotonic()
        self.manager.version = self.manager.step = trainer.version
        if trainer.version >= config.steps:
            return self._result()
        self.probe()
        self.manager.start()
        try:
            while trainer.version < config.steps:
                groups = self.queue.take(config.batch_groups, trainer.version, stop=self._failed)
                if len(groups) < config.batch_groups:
                    raise RLRunError(self._failed() or "the sample queue stopped before a batch was ready")
                with self.manager.lock:
                    kinds = dict(self.kinds)
                result = trainer.step(groups, kinds)
                self.weights.publish(merged_state_dict(trainer.model), trainer.version)
                self.manager.publish(trainer.version)  # only now: engines can already load this version
                self._log(groups, result, trainer.version - 1, time.monotonic() - started)
                if self.unwritten.total() == self.consumed >= UNWRITTEN_LIMIT * config.batch_size:
                    raise RLRunError(self._unwritten())
                if trainer.version % config.checkpoint_every == 0 or trainer.version == config.steps:
                    self._checkpoint(time.monotonic() - started)
        finally:
            self.manager.stop()
        return self._result()

    def probe(self) -> None:
        """Before any controller starts: the engine spec is well formed, its endpoint or checkpoint answers, and it
        can load new policy weights; else one line naming it."""
        from inference.engine_factory import check_weight_loading, probe_engine
        from inference.engine_support import EngineUnavailable

        spec = self.manager.spec.engine
        try:
            if isinstance(spec, str):
                probe_engine(spec, weights=True)
            else:
                check_weight_loading(spec, type(spec).__name__)
        except EngineUnavailable as exc:
            raise RLRunError(str(exc)) from None

    def _failed(self) -> str | None:
        """Why the run must stop: the manager's loop stopped, every controller keeps dying (an engine that cannot
        load, say), or no engine loads the weights a trainable sample needs."""
        if self.manager.crash:
            return self.manager.crash
        if self.manager.stall:
            return self.manager.stall
        if self.manager.failed:
            return (f"rollout controllers were restarted {self.manager.restarts} times (max_restarts="
                    f"{self.config.max_restarts}); the last failure: {self.manager.last_failure}")
        return None

    def _unwritten(self) -> str:
        reasons = ", ".join(f"{reason} x{n}" for reason, n in self.unwritten.most_common())
        return (f"the first {self.consumed} samples ended before the policy wrote a token ({reasons}): nothing can be "
                "learned from them; a context_overflow means the tasks' prompts do not fit the model's context window "
                "(small_envs renders environment tasks with compact tool schemas for small models)")

    def _log(self, groups: Sequence[Sequence[Sample]], result: Any, version: int, elapsed: float) -> None:
        samples = [s for group in groups for s in group]
        self.consumed += len(samples)
        self.unwritten.update(s.rollout.stop_reason for s in samples if s.versions is None and s.rollout is not None)
        for s in samples:
            self.sample_rows.append(_sample_row(s, version, result.advantages.get(s.sample_id),
                                                result.untrained.get(s.sample_id), self.config.max_staleness))
        staleness = [s.staleness(version) for s in samples]
        rewards = [s.reward for s in samples]
        mean = sum(rewards) / len(rewards)
        with self.manager.lock:
            self.scheduler.record_step(mean)
            self.manager.step = self.trainer.version
            drops = dict(self.queue.drops)
        wall = self.elapsed_before + elapsed
        trained_total = sum(row["trained"] for row in self.sample_rows)
        row = {
            "version": version + 1, **result.metrics,
            "reward_mean": mean, "reward_std": float(torch.tensor(rewards).std()) if len(rewards) > 1 else 0.0,
            "staleness_mean": sum(staleness) / len(staleness), "staleness_max": max(staleness),
            "queue_depth": self.queue.depth(), "samples_per_s": trained_total / wall,
            "consumed_per_s": self.consumed / wall, "engine_load": self.manager.engine_load(),
            "wall_s": wall, "verifying": self.scheduler.verifying,
            "noise_level": self.scheduler.noise.level if self.scheduler.noise is not None else 0,
            "drops": sum(drops.values()), "requeued": self.manager.events["requeued"],
        }
        self.step_rows.append(row)
        if self.on_step is not None:
            self.on_step(row)

    # -- checkpoint and resume -----------------------------------------------------------------------------------

    def _checkpoint(self, elapsed: float) -> None:
        with self.manager.lock:
            waiting = [s for group in _complete_groups(self.queue.state(), self.config.num_generations)
                       for s in group]
            state = {
                "trainer": self.trainer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "queue": waiting, "drops": dict(self.queue.drops), "events": dict(self.manager.events),
                # the admission count a resumed run starts from: what was consumed plus what waits, whole
                "accepted": self.consumed + sum(1 for s in waiting if not s.drop_reason),
                "consumed": self.consumed, "samples": self.sample_rows, "steps": self.step_rows,
                "kinds": dict(self.kinds), "elapsed_s": self.elapsed_before + elapsed,
                "config": self.config.model_dump(mode="json"),
            }
        self.checkpoints.save(state, self.trainer.version)

    def _restore(self) -> int | None:
        state = self.checkpoints.latest()
        if state is None:
            return None
        saved = RLConfig.model_validate(state["config"])
        if _run_shape(saved) != _run_shape(self.config):
            raise RLRunError(f"{self.checkpoints.directory} holds a checkpoint of a run with another batch shape "
                             f"({_run_shape(saved)} vs {_run_shape(self.config)}): resume with the same config, or "
                             "start a fresh run directory")
        self.trainer.load_state_dict(state["trainer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.queue.restore(state["queue"], state["drops"])
        self.manager.accepted = state["accepted"]
        self.manager.events.update(state["events"])
        self.consumed = state["consumed"]
        self.sample_rows, self.step_rows = list(state["samples"]), list(state["steps"])
        self.kinds.update(state["kinds"])
        self.elapsed_before = state["elapsed_s"]
        # Versions the killed run published after this checkpoint never happened in the resumed run.
        self.weights.reset(merged_state_dict(self.trainer.model), self.trainer.version)
        return self.trainer.version

    def _result(self) -> RunResult:
        return RunResult(merge_adapter(self.trainer.model), RL_SAMPLE.frame(self.sample_rows), RL_STEP.frame(self.step_rows),
                         {**dict(self.manager.events), **{f"dropped: {k}": v for k, v in self.queue.drops.items()}},
                         self.resumed_from)


def _run_shape(config: RLConfig) -> tuple[int, int, int]:
    return config.num_generations, config.batch_size, config.max_staleness


def _complete_groups(samples: Sequence[Sample], size: int) -> list[list[Sample]]:
    """The queue's complete groups; a partial group's other samples were in flight and die with the run."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.group_id, []).append(sample)
    return [group for group in groups.values() if len(group) == size]


def _answer(sample: Sample) -> str:
    """The final assistant text of a sample (what self-verification judges)."""
    if sample.rollout is None:
        return ""
    for message in reversed(sample.rollout.messages):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""


def _sample_row(sample: Sample, version: int, advantage: float | None, reason: str | None,
                max_staleness: int) -> dict[str, Any]:
    oldest, newest = sample.versions or (None, None)
    admitted, slot, limit = sample.admission or (None, None, None)
    return {
        "admission_version": admitted, "admission_slot": slot, "admission_limit": limit,
        "max_staleness": max_staleness,
        "sample_id": sample.sample_id, "group_id": sample.group_id, "task_id": sample.task_id,
        "source": sample.source, "min_policy_version": oldest, "max_policy_version": newest,
        "trainer_version": version, "staleness": sample.staleness(version), "reward": sample.reward,
        "advantage": advantage, "weight": sample.weight, "trained": advantage is not None,
        "drop_reason": reason, "n_output_tokens": sum(len(t.output_ids) for t in sample.rollout.turns())
        if sample.rollout is not None else 0,
    }

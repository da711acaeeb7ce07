"""The RL trainer and the run that feeds it (LongCat-Flash-Thinking-2601, "The DORA Asynchronous RL Framework").

``PolicyTrainer`` turns batches of whole groups into optimizer steps: it scores the sampled tokens under the current
policy over the distribution the engine sampled from (temperature and top-p, through the engine's own
``process_logits``; at the output positions only), so at staleness 0 with equal weights every token's ratio is 1
(``ratio_on_policy``, a step metric), takes group advantages, and minimises the clipped
GRPO/GSPO loss of ``training/rl/losses.py``, accumulating over micro-batches of samples with the normalisation the
whole batch would have. Groups whose rewards are all equal carry no gradient: they are reported and left out.

``run_rl`` wires the parts: a Scheduler picks groups, the RolloutManager streams them through controllers into the
SampleQueue, the trainer steps whenever a batch is ready and publishes each new version through ``FileWeightSync``.
Every step can be checkpointed whole (model, optimizer, LR schedule, RNG, version, counters, the queue's complete
groups, the scheduler's history and curriculum state); a resumed run continues the staleness bound and counters
where they were, and drops weight versions the killed run published past its last checkpoint.
"""

from __future__ import annotations

import copy
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl
import torch

from data_contracts.schemas import RL_SAMPLE, RL_STEP
from data_contracts.stage import StageError
from training.rl.config import RLConfig
from training.rl.losses import behaviour_weight, group_advantages, policy_loss
from training.rl.queue import Sample, SampleQueue
from training.rl.rollout import ControllerSpec, EnvFactory, Launcher, RolloutManager, default_env
from training.rl.scheduling import RLTask, Scheduler
from training.rl.weights import FileWeightSync

NO_GRADIENT = "equal rewards: no gradient"


UNWRITTEN_LIMIT = 4
"""Batches of samples without a single generated token after which a run stops: its tasks cannot be learned."""


class RLRunError(StageError):
    """The run cannot go on (every controller keeps dying, a checkpoint does not match the run, no sample reaches
    the policy): one line for the user, not a traceback."""


# --- scoring sampled tokens ----------------------------------------------------------------------------------------


@dataclass
class TokenBatch:
    """``(B, T)`` tensors over the trainable tokens of B samples, a sample's turns concatenated in order."""

    logprobs: torch.Tensor  # under the policy being trained, with gradient
    behaviour: torch.Tensor  # the engine's sampling log-probabilities
    mask: torch.Tensor  # 1 where a token is trained on


def completion_logprobs(model: Any, samples: Sequence[Sample], temperatures: Sequence[float], pad_id: int,
                        top_p: float = 1.0) -> TokenBatch:
    """Log-probabilities of every sampled output token under ``model`` in the distribution it was sampled from:
    logits / T, then top-p truncation, by the function the engines sample with (the sampled token always stays in
    the nucleus, so a token an older version drew keeps a finite log-probability). Each engine call is one row (its
    exact prompt ids, then its output ids), so multi-turn and summarised rollouts are scored as they were sampled;
    the output head runs at the output positions only."""
    from inference.hf_engine import process_logits

    rows = [(b, turn) for b, sample in enumerate(samples) for turn in sample.rollout.turns() if any(turn.loss_mask)]
    device = next(model.parameters()).device
    width = max(len(turn.prompt_ids) + len(turn.output_ids) for _, turn in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    row_at, position, target, sample_of, slot, behaviour, trained = [], [], [], [], [], [], []
    filled = [0] * len(samples)
    for r, (b, turn) in enumerate(rows):
        tokens = turn.prompt_ids + turn.output_ids
        ids[r, : len(tokens)] = torch.tensor(tokens)
        attention[r, : len(tokens)] = 1
        start = len(turn.prompt_ids)
        for j, token in enumerate(turn.output_ids):
            row_at.append(r)
            position.append(start + j - 1)  # the position whose logits predict output token j
            target.append(token)
            sample_of.append(b)
            slot.append(filled[b] + j)
        behaviour += turn.logprobs
        trained += turn.loss_mask
        filled[b] += len(turn.output_ids)
    hidden = model.base_model(input_ids=ids.to(device), attention_mask=attention.to(device)).last_hidden_state
    picked = hidden[torch.tensor(row_at, device=device), torch.tensor(position, device=device)]
    scale = torch.tensor([temperatures[b] for b in sample_of], device=device, dtype=torch.float32)
    targets = torch.tensor(target, device=device)
    logprobs = process_logits(model.get_output_embeddings()(picked), scale, torch.full_like(scale, top_p),
                              keep=targets)
    token_logprobs = logprobs.gather(1, targets[:, None]).squeeze(1)

    shape = (len(samples), max(filled))
    index = (torch.tensor(sample_of, device=device), torch.tensor(slot, device=device))
    return TokenBatch(
        logprobs=torch.zeros(shape, device=device).index_put(index, token_logprobs),
        behaviour=torch.zeros(shape, device=device).index_put(index, torch.tensor(behaviour, device=device)),
        mask=torch.zeros(shape, device=device, dtype=torch.long).index_put(index, torch.tensor(trained, device=device)),
    )


# --- the trainer ---------------------------------------------------------------------------------------------------


@dataclass
class StepResult:
    metrics: dict[str, float]
    advantages: dict[str, float]  # sample id -> advantage (times the sample's weight) it was trained with
    untrained: dict[str, str] = field(default_factory=dict)  # sample id -> why it carried no gradient


class PolicyTrainer:
    """The policy, its frozen reference (when ``beta > 0``), AdamW and the LR schedule; ``version`` counts steps."""

    def __init__(self, model: Any, config: RLConfig, pad_id: int) -> None:
        self.model = model
        self.config = config
        self.pad_id = pad_id
        self.version = 0
        self.reference = copy.deepcopy(model).eval().requires_grad_(False) if config.beta > 0 else None
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
        warmup = config.warmup_steps
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                          lambda step: min(1.0, (step + 1) / (warmup + 1)))

    def temperature(self, kind: Literal["env", "prompt"]) -> float:
        sampling = self.config.sampling
        return sampling.tool_temperature if kind == "env" else sampling.temperature

    def step(self, groups: Sequence[Sequence[Sample]], kinds: dict[str, Literal["env", "prompt"]]) -> StepResult:
        """One optimizer step on whole groups (``kinds``: task id -> env | prompt, for the sampling temperature)."""
        config = self.config
        samples = [s for group in groups for s in group]
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
        advantages, zero_variance = group_advantages(rewards, config.num_generations, scale=config.scale_rewards)
        flat_zero = zero_variance.repeat_interleave(config.num_generations).tolist()
        trained = [(s, float(a) * s.weight) for s, a, zero in zip(samples, advantages.tolist(), flat_zero, strict=True)
                   if not zero and any(any(t.loss_mask) for t in s.rollout.turns())]
        untrained = {s.sample_id: NO_GRADIENT for s, zero in zip(samples, flat_zero, strict=True) if zero}
        metrics: Counter[str] = Counter()
        grad_norm = 0.0
        fresh: list[float] = []  # token ratios of samples drawn by this very version, before the update
        if trained:
            self.model.train()
            total_tokens = sum(sum(sum(t.loss_mask) for t in s.rollout.turns()) for s, _ in trained)
            for chunk in _chunks(trained, config.micro_batch_size):
                loss, chunk_metrics, share = self._chunk_loss(chunk, kinds, len(trained), total_tokens, fresh)
                (loss * share).backward()
                for name, value in chunk_metrics.items():
                    metrics[name] += value * (1.0 if name == "num_tokens" else share)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.max_grad_norm))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.schedule.step()
            self.model.eval()
        self.version += 1
        summary = {
            "loss": metrics.get("loss", 0.0), "kl": metrics.get("kl", 0.0),
            "clip_ratio": metrics.get("clip_ratio/region_mean", 0.0), "ratio_mean": metrics.get("ratio_mean", 1.0),
            "behaviour_weight_mean": metrics.get("behaviour_weight_mean", 1.0), "tokens": metrics["num_tokens"],
            "grad_norm": grad_norm, "learning_rate": self.schedule.get_last_lr()[0],
            "zero_variance_groups": float(zero_variance.sum()), "groups": float(len(groups)),
            "trained_samples": float(len(trained)),
            "ratio_on_policy": sum(fresh) / len(fresh) if fresh else None,
        }
        return StepResult(summary, {s.sample_id: a for s, a in trained}, untrained)

    def _chunk_loss(self, chunk: list[tuple[Sample, float]], kinds: dict[str, Literal["env", "prompt"]],
                    n_trained: int, total_tokens: int, fresh: list[float]
                    ) -> tuple[torch.Tensor, dict[str, float], float]:
        """The loss of a micro-batch and its share of the batch loss: the samples' share for ``grpo`` and ``dr_grpo``
        (means over sequences), the tokens' share for ``bnpo`` and ``dapo`` (means over tokens). Appends to
        ``fresh`` the token ratios (trainer over engine) of samples this version drew entirely."""
        config = self.config
        samples = [s for s, _ in chunk]
        temperatures = [self.temperature(kinds[s.task_id]) for s in samples]
        top_p = config.sampling.top_p
        batch = completion_logprobs(self.model, samples, temperatures, self.pad_id, top_p)
        with torch.no_grad():
            for row, s in enumerate(samples):
                if s.versions == (self.version, self.version):
                    valid = batch.mask[row].bool()
                    fresh += (batch.logprobs[row][valid] - batch.behaviour[row][valid]).exp().tolist()
        reference = None
        if self.reference is not None:
            with torch.no_grad():
                reference = completion_logprobs(self.reference, samples, temperatures, self.pad_id, top_p).logprobs
        if config.old_policy == "behaviour":
            old, weights = batch.behaviour, None
        else:  # decoupled PPO: the ratio to the current policy, a truncated weight for how the sample was drawn
            old = batch.logprobs.detach()
            weights = behaviour_weight(old, batch.behaviour, batch.mask, cap=config.behaviour_cap)
        advantages = torch.tensor([a for _, a in chunk], device=batch.logprobs.device)
        loss, metrics = policy_loss(
            batch.logprobs, old, advantages, batch.mask, reference, loss_type=config.loss_type,
            importance_sampling_level=config.importance_sampling_level, epsilon=config.epsilon,
            epsilon_high=config.epsilon_high, beta=config.beta,
            max_completion_length=config.sampling.max_tokens * config.sampling.max_turns, behaviour_weights=weights)
        tokens = float(batch.mask.sum())
        share = tokens / total_tokens if config.loss_type in ("bnpo", "dapo") else len(chunk) / n_trained
        return loss, {**metrics, "loss": float(loss.detach())}, share

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.version = state["version"]
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


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
        partial = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        torch.save(state, partial)
        partial.replace(final)
        pointer = self.directory / f".{self.LATEST}.{os.getpid()}.tmp"
        pointer.write_text(final.name)
        pointer.replace(self.directory / self.LATEST)
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
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.trainer = PolicyTrainer(model, self.config, pad)
        self.kinds = {task.task_id: task.kind for task in self.tasks}
        self.weights = FileWeightSync(self.run_dir / "weights")
        self.checkpoints = Checkpoints(self.run_dir / "checkpoints")
        self.scheduler = Scheduler(self.tasks, self.config.scheduling, self.config.steps, seed=self.config.seed)
        self.queue = SampleQueue(self.config.num_generations, self.config.max_staleness, on_drop=self._dropped)
        spec = ControllerSpec(self.engine or f"hf:{self.model_dir}", str(self.weights.directory), self.config,
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
                self.weights.publish(trainer.model.state_dict(), trainer.version)
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
        from inference.engine_support import EngineUnavailable
        from inference.engines import check_weight_loading, probe_engine

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
        self.weights.reset(self.trainer.model.state_dict(), self.trainer.version)
        return self.trainer.version

    def _result(self) -> RunResult:
        return RunResult(self.trainer.model, RL_SAMPLE.frame(self.sample_rows), RL_STEP.frame(self.step_rows),
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

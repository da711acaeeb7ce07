"""The RL trainer (LongCat-Flash-Thinking-2601, "The DORA Asynchronous RL Framework"); the run that feeds it is
``training/async_rl/run.py``.

``PolicyTrainer`` turns batches of whole groups into optimizer steps: it scores the sampled tokens under the current
policy over the distribution the engine sampled from (temperature and top-p, through the engine's own
``process_logits``; at the output positions only), so at staleness 0 with equal weights every token's ratio is 1
(``ratio_on_policy``, a step metric), takes group advantages, and minimises the clipped
GRPO/GSPO loss of ``training/async_rl/losses.py``, accumulating over micro-batches of samples with the normalisation the
whole batch would have. Groups whose rewards are all equal carry no gradient: they are reported and left out.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from training.adapters import causal_lm
from training.async_rl.config import RLConfig
from training.async_rl.losses import behaviour_weight, group_advantages, policy_loss
from training.async_rl.queue import Sample

NO_GRADIENT = "equal rewards: no gradient"


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
    model = causal_lm(model)  # its backbone and output layer, adapters in place
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
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],  # adapters: theirs
                                           lr=config.learning_rate, weight_decay=0.0)
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

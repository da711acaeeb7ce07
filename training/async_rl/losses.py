"""Losses of the asynchronous RL trainer: group advantages, the clipped policy loss (GRPO / GSPO) and the
behaviour-mismatch weight. Pure tensor functions over right-padded ``(B, T)`` completion tensors; the loop, the
queue and the engines live elsewhere (STYLE.md, "For the training half": keep the losses pure functions).

Names and conventions follow TRL 1.16 (``GRPOTrainer._compute_loss``), so a config written for TRL means the same
here. Three different log-probabilities meet in the loss, and DESIGN.md §7 asks to keep their roles apart:

- ``old_logprobs`` — the policy the PPO ratio ``exp(logprobs - old_logprobs)`` is taken against and clipped
  around: the policy version that sampled the batch, scored by the trainer (AReaL's "proximal" policy) or, when the
  trainer does not recompute them, as reported by the engine. With one optimizer step per batch and no recompute
  this is ``logprobs.detach()`` and the ratio is 1 (TRL's on-policy path).
- the GSPO sequence ratio (``importance_sampling_level="sequence"``) — the same PPO ratio taken per sequence: the
  exponential of the masked *mean* of the per-token log-ratios against ``old_logprobs``, clipped once per sequence
  and broadcast over its tokens. It changes how the trust region is measured, not which policies are compared.
- the behaviour weight (``behaviour_weight``) — a separate, detached, truncated importance weight
  ``min(exp(train - behaviour), cap)`` between the trainer's log-probabilities of the sampling version and the
  engine's own sampling log-probabilities. Asynchronous samples come from an older policy version *and* from a
  different engine's numerics (vLLM kernels, another precision); this weight corrects the latter without entering
  the clip. This is decoupled PPO as in AReaL's ``ppo_actor_loss_fn`` (ratio against the proximal policy, a
  behaviour weight multiplying the clipped term), and it takes the place TRL gives its vLLM importance-sampling
  correction: it multiplies the clipped per-token loss, before the KL term is added.
"""

from __future__ import annotations

from typing import get_args

import torch

from training.async_rl.config import ImportanceSamplingLevel, LossType, Scale


def _check_choice(name: str, value: str, allowed: type) -> None:
    choices = get_args(allowed)
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}: choose one of {', '.join(map(repr, choices))}")


def _nanstd(values: torch.Tensor) -> torch.Tensor:
    """Unbiased (Bessel-corrected) std over the last dimension ignoring NaN rewards, as TRL's ``nanstd``; NaN
    where fewer than two values are present."""
    count = (~values.isnan()).sum(dim=-1)
    squares = (values - values.nanmean(dim=-1, keepdim=True)).square()
    variance = torch.where(count > 1, squares.nansum(dim=-1) / (count - 1).clamp(min=1), torch.nan)
    return variance.sqrt()


def group_advantages(
    rewards: torch.Tensor, group_size: int, *, scale: Scale = "group", epsilon: float = 1e-4
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages of ``rewards`` ``(N,)`` laid out as consecutive groups of ``group_size`` completions of one
    prompt (TRL's ``view(-1, num_generations)`` layout).

    ``(r - group mean) / (std + epsilon)``, with TRL's ``scale_rewards``: ``"group"`` divides by the group's std,
    ``"batch"`` by the std of the whole batch (the mean stays the group's), ``"none"`` does not divide. The std is
    the unbiased one, as TRL 1.16 computes it. A NaN reward (a reward function returned None for every component)
    is left out of the mean and std and gets advantage 0, as in TRL.

    Returns the advantages ``(N,)`` and, per group ``(N // group_size,)``, whether it had zero variance (or fewer
    than two scored completions): such a group carries no gradient, its advantages are exactly 0, and the trainer
    reports the fraction (TRL's ``frac_reward_zero_std``).
    """
    _check_choice("scale", scale, Scale)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be one-dimensional (N,), got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size={group_size}: a group needs at least 2 completions to have a baseline")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    if not rewards.is_floating_point():
        rewards = rewards.float()
    groups = rewards.view(-1, group_size)
    group_std = _nanstd(groups)
    # TRL's zero-std test (torch.isclose to 0); a NaN std (under two scored completions) is no signal either.
    zero_variance = torch.isclose(group_std, torch.zeros_like(group_std)) | group_std.isnan()
    centred = groups - groups.nanmean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (group_std.unsqueeze(1) + epsilon)
    elif scale == "batch":
        centred = centred / (_nanstd(rewards) + epsilon)
    # Float rounding can leave r - mean slightly off 0 in a constant group; force the exact 0 the metric promises.
    advantages = torch.where(zero_variance.unsqueeze(1), 0.0, centred.nan_to_num(nan=0.0))
    return advantages.view(-1), zero_variance


@torch.no_grad()
def behaviour_weight(
    train_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, *, cap: float
) -> torch.Tensor:
    """Truncated importance weight ``min(exp(train - behaviour), cap)`` per token, detached; 0 outside ``mask``.

    ``train_logprobs``: the trainer's log-probabilities of the sampled tokens under the policy version that sampled
    them; ``behaviour_logprobs``: the engine's sampling log-probabilities of the same tokens. Truncating at ``cap``
    bounds the variance a token the engine found unlikely can add (truncated importance sampling; AReaL's "clamp"
    action). Pass the result to ``policy_loss(..., behaviour_weights=...)``.
    """
    if cap < 1.0:
        raise ValueError(
            f"cap={cap}: a cap below 1 would down-weight tokens both engines agree on; use cap >= 1"
        )
    valid = mask.bool()
    # Padding may hold anything (-inf, NaN) in either input: keep it out of exp.
    gap = torch.where(valid, train_logprobs - behaviour_logprobs, 0.0)
    return torch.where(valid, gap.exp().clamp(max=cap), 0.0)


def _logged_mean(values: torch.Tensor, valid: torch.Tensor | None) -> float:
    """TRL's logged mean: over unmasked tokens, or over sequences (``valid`` None) for per-sequence values."""
    values = values.float()
    if valid is None:
        return values.mean().item()
    return (torch.where(valid, values, 0.0).sum() / valid.sum().clamp(min=1)).item()


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    *,
    loss_type: LossType,
    importance_sampling_level: ImportanceSamplingLevel,
    epsilon: float,
    epsilon_high: float,
    beta: float,
    max_completion_length: int | None = None,
    behaviour_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy loss of GRPO (token ratios) or GSPO (sequence ratios), aggregated as TRL's ``loss_type``.

    ``logprobs`` (with gradient), ``old_logprobs``, ``mask`` and, when ``beta > 0``, ``ref_logprobs`` are ``(B, T)``
    over completion tokens; ``advantages`` is ``(B,)``. Per token: ``-min(ratio * A, clip(ratio, 1 - epsilon,
    1 + epsilon_high) * A)``, times ``behaviour_weights`` when given, plus ``beta`` times the k3 estimate of
    KL(policy || reference) ``exp(ref - logp) - (ref - logp) - 1``. No entropy term.

    Aggregation (TRL's names): ``grpo`` averages each sequence over its tokens, then the batch; ``bnpo`` and
    ``dapo`` divide the sum by the number of unmasked tokens; ``dr_grpo`` divides it by ``B * max_completion_length``.
    A fully masked row adds 0 (it still counts in ``grpo``'s batch mean and ``dr_grpo``'s ``B``, as in TRL).

    Returns the scalar loss and float metrics named as TRL logs them: ``clip_ratio/low_mean``,
    ``clip_ratio/high_mean``, ``clip_ratio/region_mean`` (share of tokens, or of sequences at sequence level, whose
    ratio is clipped where the clip binds), ``ratio_mean``, ``kl`` (when ``beta > 0``), ``behaviour_weight_mean``
    (when weights are given) and ``num_tokens``.
    """
    _check_choice("loss_type", loss_type, LossType)
    _check_choice("importance_sampling_level", importance_sampling_level, ImportanceSamplingLevel)
    if logprobs.dim() != 2 or old_logprobs.shape != logprobs.shape or mask.shape != logprobs.shape:
        raise ValueError(
            f"logprobs, old_logprobs and mask must share one (B, T) shape, got {tuple(logprobs.shape)}, "
            f"{tuple(old_logprobs.shape)} and {tuple(mask.shape)}"
        )
    if behaviour_weights is not None and behaviour_weights.shape != logprobs.shape:
        raise ValueError(
            f"behaviour_weights must be (B, T) like logprobs, got {tuple(behaviour_weights.shape)}"
        )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (B,) = ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
    if epsilon < 0 or epsilon_high < 0:
        raise ValueError(f"epsilon={epsilon}, epsilon_high={epsilon_high}: clip ranges must be >= 0")
    if beta < 0:
        raise ValueError(f"beta={beta}: the KL coefficient must be >= 0 (0 disables the KL term)")
    if beta > 0 and (ref_logprobs is None or ref_logprobs.shape != logprobs.shape):
        raise ValueError("beta > 0 needs ref_logprobs of the same (B, T) shape as logprobs; or set beta=0")
    if loss_type == "dr_grpo" and (max_completion_length is None or max_completion_length < 1):
        raise ValueError(
            "loss_type 'dr_grpo' divides by B * max_completion_length: pass max_completion_length >= 1"
        )

    valid = mask.bool()
    tokens_per_row = valid.sum(dim=1).to(logprobs.dtype)
    # Padding may hold anything (-inf, NaN) in any input; selecting with `where` (never multiplying by the mask)
    # keeps it out of exp and of the sums, and gives fully masked rows ratio 1 and loss 0 instead of NaN.
    log_ratio = torch.where(valid, logprobs - old_logprobs, 0.0)
    if importance_sampling_level == "token":
        log_weights = log_ratio
    else:
        # GSPO: one ratio per sequence, exp of the mean log-ratio, kept (B, 1) and broadcast as TRL does.
        log_weights = (log_ratio.sum(dim=1) / tokens_per_row.clamp(min=1.0)).unsqueeze(1)
    ratio = log_weights.exp()
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon_high)
    adv = advantages.unsqueeze(1).to(logprobs.dtype)
    per_token = -torch.min(ratio * adv, clipped * adv)
    if behaviour_weights is not None:
        # Selected, not multiplied as is: a NaN weight on padding would turn the sequence-level gradient into NaN.
        per_token = per_token * torch.where(valid, behaviour_weights, 0.0)
    if beta > 0:
        ref_gap = torch.where(valid, ref_logprobs - logprobs, 0.0)
        kl = ref_gap.exp() - ref_gap - 1
        per_token = per_token + beta * kl
    masked = torch.where(valid, per_token, 0.0)

    if loss_type == "grpo":
        loss = (masked.sum(dim=1) / tokens_per_row.clamp(min=1.0)).mean()
    elif loss_type == "dr_grpo":
        loss = masked.sum() / (logprobs.shape[0] * max_completion_length)
    else:
        # TRL's dapo divides by the completion tokens of the whole generation batch (all processes, all
        # accumulation steps); for one batch in one process that is this batch's token count, i.e. bnpo.
        loss = masked.sum() / tokens_per_row.sum().clamp(min=1.0)

    with torch.no_grad():
        # Clipped "where the clip binds", as TRL counts it: below the range with A < 0, above it with A > 0.
        low = (ratio < 1 - epsilon) & (adv < 0)
        high = (ratio > 1 + epsilon_high) & (adv > 0)
        # Ratio-shaped values are per token, or per sequence at sequence level (averaged over all B rows, as TRL).
        ratio_valid = valid if importance_sampling_level == "token" else None
        metrics = {
            "clip_ratio/low_mean": _logged_mean(low, ratio_valid),
            "clip_ratio/high_mean": _logged_mean(high, ratio_valid),
            "clip_ratio/region_mean": _logged_mean(low | high, ratio_valid),
            "ratio_mean": _logged_mean(ratio, ratio_valid),
            "num_tokens": float(valid.sum().item()),
        }
        if beta > 0:
            metrics["kl"] = _logged_mean(kl, valid)
        if behaviour_weights is not None:
            metrics["behaviour_weight_mean"] = _logged_mean(behaviour_weights, valid)
    return loss, metrics

"""RL losses: hand-computed cases, equality with TRL 1.16's ``GRPOTrainer._compute_loss`` (value, gradient and
logged clip/KL metrics) on a real tiny Qwen2 model, and properties (padding invariance, the on-policy gradient is
the policy-gradient estimator)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training.async_rl.losses import behaviour_weight, group_advantages, policy_loss

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]
LEVELS = ["token", "sequence"]
CLIP = {"epsilon": 0.2, "epsilon_high": 0.28}
MAX_COMPLETION_LENGTH = 4


def _loss(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, dict[str, float]]:
    options = {"beta": 0.0, "max_completion_length": MAX_COMPLETION_LENGTH, **CLIP, **kwargs}
    return policy_loss(*args, **options)


# ---- hand-computed cases --------------------------------------------------------------------------------------
# A 2x3 batch. Ratios row 0: [2, 0.5, 8] (A = +1, 3 tokens), row 1: [0.25, 1, pad] (A = -2, 2 tokens); clip range
# [0.8, 1.28]. The padded slot holds -inf in old_logprobs, which must not leak into anything.
# Token level, per-token loss -min(r*A, clip(r)*A):
#   row 0: [-1.28 (high clip), -0.5, -1.28 (high clip)]  sum -3.06, mean -1.02
#   row 1: [1.6 (low clip: -min(-0.5, -1.6)), 2.0]        sum  3.6,  mean  1.8
# Sequence level (GSPO), ratio = exp(mean log-ratio): row 0 cbrt(8) = 2 -> 1.28 clip, row 1 sqrt(0.25) = 0.5 -> 0.8:
#   row 0: -1.28 on 3 tokens (sum -3.84); row 1: 1.6 on 2 tokens (sum 3.2)
HAND_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
HAND_OLD = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -math.inf]])
HAND_RATIOS = torch.tensor([[2.0, 0.5, 8.0], [0.25, 1.0, 1.0]])
HAND_ADVANTAGES = torch.tensor([1.0, -2.0])
HAND_EXPECTED = {
    # (level, loss_type): loss
    ("token", "grpo"): (-1.02 + 1.8) / 2,
    ("token", "bnpo"): (-3.06 + 3.6) / 5,
    ("token", "dapo"): (-3.06 + 3.6) / 5,
    ("token", "dr_grpo"): (-3.06 + 3.6) / (2 * MAX_COMPLETION_LENGTH),
    ("sequence", "grpo"): (-1.28 + 1.6) / 2,
    ("sequence", "bnpo"): (-3.84 + 3.2) / 5,
    ("sequence", "dapo"): (-3.84 + 3.2) / 5,
    ("sequence", "dr_grpo"): (-3.84 + 3.2) / (2 * MAX_COMPLETION_LENGTH),
}
HAND_METRICS = {
    # token level: shares of the 5 tokens; sequence level: shares of the 2 sequences
    "token": {"low": 1 / 5, "high": 2 / 5, "region": 3 / 5, "ratio_mean": (2 + 0.5 + 8 + 0.25 + 1) / 5},
    "sequence": {"low": 1 / 2, "high": 1 / 2, "region": 1.0, "ratio_mean": (2 + 0.5) / 2},
}


def _hand_logprobs() -> torch.Tensor:
    logprobs = torch.where(HAND_MASK.bool(), HAND_OLD + HAND_RATIOS.log(), -2.0)
    return logprobs.requires_grad_()


@pytest.mark.parametrize(("level", "loss_type"), list(HAND_EXPECTED))
def test_hand_computed_loss_and_metrics(level: str, loss_type: str) -> None:
    logprobs = _hand_logprobs()
    loss, metrics = _loss(
        logprobs, HAND_OLD, HAND_ADVANTAGES, HAND_MASK, loss_type=loss_type, importance_sampling_level=level
    )
    assert loss.item() == pytest.approx(HAND_EXPECTED[level, loss_type], abs=1e-6)
    expected = HAND_METRICS[level]
    assert metrics["clip_ratio/low_mean"] == pytest.approx(expected["low"])
    assert metrics["clip_ratio/high_mean"] == pytest.approx(expected["high"])
    assert metrics["clip_ratio/region_mean"] == pytest.approx(expected["region"])
    assert metrics["ratio_mean"] == pytest.approx(expected["ratio_mean"], rel=1e-6)
    assert metrics["num_tokens"] == 5.0
    assert "kl" not in metrics
    loss.backward()
    assert torch.isfinite(logprobs.grad).all()
    assert logprobs.grad[1, 2] == 0.0


def test_hand_computed_gradient_flows_only_through_unclipped_tokens() -> None:
    # grpo, token level: d/dlogp of -r*A/len is -r*A/(len*B) where the unclipped term is the minimum, else 0.
    logprobs = _hand_logprobs()
    loss, _ = _loss(
        logprobs, HAND_OLD, HAND_ADVANTAGES, HAND_MASK, loss_type="grpo", importance_sampling_level="token"
    )
    loss.backward()
    expected = torch.tensor([[0.0, -0.5 * 1 / 3 / 2, 0.0], [0.0, -1.0 * -2 / 2 / 2, 0.0]])
    torch.testing.assert_close(logprobs.grad, expected)


def test_hand_computed_k3_kl_is_added_with_beta() -> None:
    # On-policy with A = 0: the loss is beta times the k3 KL, exp(d) - d - 1 with d = ref - logp.
    logprobs = torch.zeros(2, 3, requires_grad=True)
    ln2 = math.log(2)
    ref = torch.tensor([[0.0, ln2, 0.0], [ln2, ln2, math.nan]])
    kl = 1 - ln2  # exp(ln 2) - ln 2 - 1
    loss, metrics = _loss(
        logprobs,
        logprobs.detach(),
        torch.zeros(2),
        HAND_MASK,
        ref,
        loss_type="grpo",
        importance_sampling_level="token",
        beta=0.1,
    )
    assert loss.item() == pytest.approx(0.1 * (kl / 3 + kl) / 2)
    assert metrics["kl"] == pytest.approx(3 * kl / 5)
    loss.backward()
    assert torch.isfinite(logprobs.grad).all()


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level", LEVELS)
def test_fully_masked_row_adds_nothing_and_no_nan(loss_type: str, level: str) -> None:
    logprobs = _hand_logprobs()
    garbage = torch.full((1, 3), math.nan)
    with_empty = torch.cat([logprobs, garbage])
    old = torch.cat([HAND_OLD, garbage])
    mask = torch.cat([HAND_MASK, torch.zeros(1, 3, dtype=HAND_MASK.dtype)])
    options = {"loss_type": loss_type, "importance_sampling_level": level, "beta": 0.05}
    loss, metrics = _loss(
        with_empty, old, torch.tensor([1.0, -2.0, 3.0]), mask, torch.cat([HAND_OLD, garbage]), **options
    )
    alone, _ = _loss(logprobs, HAND_OLD, HAND_ADVANTAGES, HAND_MASK, HAND_OLD, **options)
    # As in TRL, the empty row still counts in grpo's batch mean and in dr_grpo's B.
    scale = 2 / 3 if loss_type in ("grpo", "dr_grpo") else 1.0
    assert loss.item() == pytest.approx(alone.item() * scale, abs=1e-6)
    assert all(math.isfinite(value) for value in metrics.values())
    loss.backward()
    assert torch.isfinite(logprobs.grad).all()


@pytest.mark.parametrize("level", LEVELS)
def test_all_tokens_masked_gives_zero_loss(level: str) -> None:
    logprobs = torch.zeros(2, 3, requires_grad=True)
    loss, metrics = _loss(
        logprobs,
        logprobs.detach(),
        torch.ones(2),
        torch.zeros(2, 3),
        loss_type="bnpo",
        importance_sampling_level=level,
    )
    assert loss.item() == 0.0
    assert metrics["num_tokens"] == 0.0
    loss.backward()
    assert (logprobs.grad == 0).all()


# ---- group advantages -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scale", "spread"),
    [
        # group [0, 1]: mean 0.5, unbiased std sqrt(0.5); batch [1, 1, 0, 1]: unbiased std 0.5
        ("group", 0.5 / (math.sqrt(0.5) + 1e-4)),
        ("batch", 0.5 / (0.5 + 1e-4)),
        ("none", 0.5),
    ],
)
def test_group_advantages_by_hand(scale: str, spread: float) -> None:
    advantages, zero_variance = group_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2, scale=scale)
    torch.testing.assert_close(advantages, torch.tensor([0.0, 0.0, -spread, spread]))
    assert zero_variance.tolist() == [True, False]


def test_group_advantages_match_trl_unbiased_std() -> None:
    from trl.trainer.utils import nanstd

    rewards = torch.rand(24, generator=torch.Generator().manual_seed(0))
    groups = rewards.view(-1, 4)
    expected = (groups - groups.mean(1, keepdim=True)) / (nanstd(groups, dim=1).unsqueeze(1) + 1e-4)
    advantages, _ = group_advantages(rewards, 4)
    torch.testing.assert_close(advantages, expected.view(-1))


def test_constant_group_is_exactly_zero_and_unscored_rewards_are_left_out() -> None:
    # 0.1 is not exact in binary: r - mean can round off zero; the advantage must still be exactly 0.
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.0, 1.0, math.nan, 0.5, math.nan, math.nan])
    advantages, zero_variance = group_advantages(rewards, 3)
    assert advantages[:3].tolist() == [0.0, 0.0, 0.0]
    # group 2: the NaN reward is left out of mean and std and gets advantage 0
    assert advantages[4] == -advantages[3] > 0 and advantages[5] == 0.0
    # group 3: one scored completion has no baseline
    assert advantages[6:].tolist() == [0.0, 0.0, 0.0]
    assert zero_variance.tolist() == [True, False, True]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: group_advantages(torch.zeros(4), 2, scale="rank"), "'group', 'batch', 'none'"),
        (lambda: group_advantages(torch.zeros(5), 2), "groups of 2"),
        (lambda: group_advantages(torch.zeros(4), 1), "at least 2"),
        (lambda: _hand_case(loss_type="ppo"), "'grpo', 'bnpo', 'dr_grpo', 'dapo'"),
        (lambda: _hand_case(importance_sampling_level="segment"), "'token', 'sequence'"),
        (lambda: _hand_case(beta=0.1), "ref_logprobs"),
        (lambda: _hand_case(loss_type="dr_grpo", max_completion_length=None), "max_completion_length"),
        (lambda: behaviour_weight(HAND_OLD, HAND_OLD, HAND_MASK, cap=0.5), "cap >= 1"),
    ],
)
def test_bad_options_are_refused(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def _hand_case(**overrides: Any) -> tuple[torch.Tensor, dict[str, float]]:
    options = {"loss_type": "grpo", "importance_sampling_level": "token", **overrides}
    return _loss(_hand_logprobs(), HAND_OLD, HAND_ADVANTAGES, HAND_MASK, **options)


# ---- behaviour weight -----------------------------------------------------------------------------------------


def test_behaviour_weight_is_truncated_detached_and_masked() -> None:
    behaviour = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, math.nan]])
    train = (behaviour + torch.tensor([[0.5, 3.0, 1.5], [1.0, 1.0, 1.0]]).log()).nan_to_num(0.0)
    train.requires_grad_()
    weights = behaviour_weight(train, behaviour, HAND_MASK, cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 2.0, 1.5], [1.0, 1.0, 0.0]]))
    assert not weights.requires_grad


@pytest.mark.parametrize("level", LEVELS)
def test_behaviour_weight_scales_the_clipped_term_not_the_kl(level: str) -> None:
    options = {"loss_type": "bnpo", "importance_sampling_level": level}
    ref = HAND_OLD.nan_to_num(neginf=0.0) - 0.3
    plain, _ = _loss(_hand_logprobs(), HAND_OLD, HAND_ADVANTAGES, HAND_MASK, **options)
    ones, _ = _loss(
        _hand_logprobs(), HAND_OLD, HAND_ADVANTAGES, HAND_MASK, behaviour_weights=torch.ones(2, 3), **options
    )
    halved, metrics = _loss(
        _hand_logprobs(),
        HAND_OLD,
        HAND_ADVANTAGES,
        HAND_MASK,
        behaviour_weights=torch.full((2, 3), 0.5),
        **options,
    )
    assert ones.item() == pytest.approx(plain.item())
    assert halved.item() == pytest.approx(plain.item() / 2)
    assert metrics["behaviour_weight_mean"] == pytest.approx(0.5)
    kl_only, _ = _loss(_hand_logprobs(), HAND_OLD, torch.zeros(2), HAND_MASK, ref, beta=0.1, **options)
    zero_weighted, _ = _loss(
        _hand_logprobs(),
        HAND_OLD,
        HAND_ADVANTAGES,
        HAND_MASK,
        ref,
        beta=0.1,
        behaviour_weights=torch.zeros(2, 3),
        **options,
    )
    assert zero_weighted.item() == pytest.approx(kl_only.item())


# ---- properties -----------------------------------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> dict[str, Any]:
    rows, length = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=rows * length, max_size=rows * length)))
    logprobs = -torch.rand(rows, length, generator=generator, dtype=torch.float64) * 3
    return {
        "logprobs": logprobs,
        "old": logprobs + torch.randn(rows, length, generator=generator, dtype=torch.float64) * 0.3,
        "ref": logprobs + torch.randn(rows, length, generator=generator, dtype=torch.float64) * 0.3,
        "advantages": torch.randn(rows, generator=generator, dtype=torch.float64),
        "mask": mask.view(rows, length),
    }


@settings(max_examples=60, deadline=None)
@given(
    batch=batches(),
    pad=st.integers(1, 4),
    loss_type=st.sampled_from(LOSS_TYPES),
    level=st.sampled_from(LEVELS),
    beta=st.sampled_from([0.0, 0.05]),
)
def test_appending_masked_tokens_changes_nothing(
    batch: dict[str, Any], pad: int, loss_type: str, level: str, beta: float
) -> None:
    def run(padding: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        def padded(values: torch.Tensor, fill: float) -> torch.Tensor:
            return torch.cat(
                [values, torch.full((values.shape[0], padding), fill, dtype=values.dtype)], dim=1
            )

        logprobs = padded(batch["logprobs"], math.nan).requires_grad_()
        weights = behaviour_weight(batch["logprobs"], batch["old"], batch["mask"], cap=2.0)
        loss, metrics = policy_loss(
            logprobs,
            padded(batch["old"], -math.inf),
            batch["advantages"],
            padded(batch["mask"], False),
            padded(batch["ref"], math.nan),
            loss_type=loss_type,
            importance_sampling_level=level,
            beta=beta,
            max_completion_length=10,
            behaviour_weights=padded(weights, math.nan),
            **CLIP,
        )
        loss.backward()
        return loss, logprobs.grad, metrics

    loss, grad, metrics = run(0)
    padded_loss, padded_grad, padded_metrics = run(pad)
    torch.testing.assert_close(padded_loss, loss)
    torch.testing.assert_close(padded_grad[:, : grad.shape[1]], grad)
    assert (padded_grad[:, grad.shape[1] :] == 0).all()
    assert padded_metrics == pytest.approx(metrics)


@settings(max_examples=60, deadline=None)
@given(batch=batches(), level=st.sampled_from(LEVELS))
def test_on_policy_gradient_is_the_policy_gradient_estimator(batch: dict[str, Any], level: str) -> None:
    # With old == new the ratio is 1 and never clipped, so grad = -mean_b(A_b * mean_t grad logp_bt): the
    # REINFORCE estimator with the grpo per-sequence mean (GSPO equals GRPO on-policy, STACK.md's TRL notes).
    logprobs = batch["logprobs"].clone().requires_grad_()
    loss, _ = policy_loss(
        logprobs,
        logprobs.detach(),
        batch["advantages"],
        batch["mask"],
        loss_type="grpo",
        importance_sampling_level=level,
        beta=0.0,
        **CLIP,
    )
    loss.backward()
    mask = batch["mask"].double()
    lengths = mask.sum(1, keepdim=True).clamp(min=1)
    expected = -batch["advantages"].unsqueeze(1) * mask / lengths / mask.shape[0]
    torch.testing.assert_close(logprobs.grad, expected)


# ---- equality with TRL 1.16 -----------------------------------------------------------------------------------
# A real GRPOTrainer over a tiny Qwen2 (hidden 16, 1 layer, vocab 64) calls its own _compute_loss on an inputs dict
# as _generate_and_score_completions would build it; policy_loss gets per-token logprobs computed independently
# (plain forward, log_softmax, gather) from the same model. The path is TRL's plain one: one process, no vLLM (so
# no importance-sampling correction), gradient_accumulation_steps = steps_per_generation = num_iterations = 1,
# no entropy bonus or mask, no delta, and use_bias_correction_kl=False (TRL 1.16 defaults it to True: it multiplies
# the KL by the ratio, which policy_loss does not do).
VOCAB = 64
PROMPT_IDS = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 0, 10], [11, 12, 13]])
COMPLETION_LENGTHS = [5, 3, 4, 2]
# Per-row mean log-ratio against old_logprobs: high clip, low clip, inside, inside (A signs +, -, +, -).
ROW_DRIFT = torch.tensor([0.5, -0.5, 0.1, -0.05])


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 checkpoint directory: GRPOTrainer builds its reference model from the policy's path."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<|endoftext|>": 0, "<|im_end|>": 1, **{f"t{i}": i for i in range(2, VOCAB)}}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t2")),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    # As training/tiny_model.py builds its configs, at a size that runs in milliseconds.
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    directory = tmp_path_factory.mktemp("tiny-policy")
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def _tiny_trainer(policy: Path, output_dir: Path, loss_type: str, level: str, beta: float) -> Any:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        report_to="none",
        use_vllm=False,
        num_generations=2,
        per_device_train_batch_size=4,
        max_completion_length=8,
        loss_type=loss_type,
        importance_sampling_level=level,
        beta=beta,
        use_bias_correction_kl=False,
        **CLIP,
    )
    trainer = GRPOTrainer(
        model=str(policy),
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t2 t3"] * 4}),
    )
    assert (args.gradient_accumulation_steps, args.steps_per_generation, trainer.num_iterations) == (1, 1, 1)
    assert (beta > 0) == (trainer.ref_model is not None)
    # Set by Trainer's training loop for each step; one micro-batch per optimizer step here.
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


def _completion_logprobs(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    length = inputs["completion_ids"].shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -length - 1 : -1]
    return logits.log_softmax(-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)


def _trl_inputs(model: Any) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    rows, length = len(COMPLETION_LENGTHS), max(COMPLETION_LENGTHS)
    completion_mask = (torch.arange(length) < torch.tensor(COMPLETION_LENGTHS).unsqueeze(1)).long()
    inputs = {
        "prompt_ids": PROMPT_IDS,
        "prompt_mask": (PROMPT_IDS != 0).long(),
        "completion_ids": torch.randint(2, VOCAB, (rows, length), generator=generator) * completion_mask,
        "completion_mask": completion_mask,
        "advantages": group_advantages(torch.tensor([1.0, 0.0, 0.3, 0.1]), 2)[0],
        "num_items_in_batch": completion_mask.sum(),
    }
    with torch.no_grad():
        current = _completion_logprobs(model, inputs)
    noise = torch.randn(rows, length, generator=generator)
    inputs["old_per_token_logps"] = current - ROW_DRIFT.unsqueeze(1) - 0.4 * noise
    inputs["ref_per_token_logps"] = current + 0.3 * torch.randn(rows, length, generator=generator)
    return inputs


def _gradients(model: Any) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    return grads


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_equals_trl_compute_loss(
    tiny_policy: Path, tmp_path: Path, loss_type: str, level: str, beta: float
) -> None:
    trainer = _tiny_trainer(tiny_policy, tmp_path, loss_type, level, beta)
    model = trainer.model
    inputs = _trl_inputs(model)

    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = _gradients(model)

    loss, metrics = policy_loss(
        _completion_logprobs(model, inputs),
        inputs["old_per_token_logps"],
        inputs["advantages"],
        inputs["completion_mask"],
        inputs["ref_per_token_logps"],
        loss_type=loss_type,
        importance_sampling_level=level,
        beta=beta,
        max_completion_length=trainer.max_completion_length,
        **CLIP,
    )
    loss.backward()
    grads = _gradients(model)

    torch.testing.assert_close(loss, trl_loss, rtol=1e-5, atol=1e-6)
    assert len(grads) == len(trl_grads) > 0
    for grad, trl_grad in zip(grads, trl_grads, strict=True):
        torch.testing.assert_close(grad, trl_grad, rtol=1e-5, atol=1e-6)
    logged = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    for name in ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"] + ["kl"] * (
        beta > 0
    ):
        assert metrics[name] == pytest.approx(logged[name], abs=1e-6), name
    # the batch exercises the clip on both sides
    assert metrics["clip_ratio/low_mean"] > 0 and metrics["clip_ratio/high_mean"] > 0

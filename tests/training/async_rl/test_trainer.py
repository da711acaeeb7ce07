"""The trainer: sampled tokens scored as they were sampled, micro-batches that add up to the batch, the synchronous
baseline, resume that continues the bound and the counters, and config errors that say what to set."""

from __future__ import annotations

import pytest
import torch
from inference_support import tiny_checkpoint
from pydantic import ValidationError
from rl_fixtures import VersionedTestEngine, prompt_tasks
from transformers import AutoModelForCausalLM

from inference.rollout import Rollout, Segment, Turn
from training.async_rl.config import RLConfig
from training.async_rl.controllers import ThreadLauncher
from training.async_rl.queue import Sample
from training.async_rl.run import RLRun
from training.async_rl.trainer import PolicyTrainer, completion_logprobs
from training.async_rl.weights import FileWeightSync


def model():
    return AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint()), local_files_only=True).eval()


def sample(sample_id: str, turns: list[Turn], reward: float, group: str = "g") -> Sample:
    rollout = Rollout(sample_id, group, "qa", "t", [], [Segment(turns=turns)], reward, {}, reward == 1.0)
    return Sample(sample_id, group, "t", "qa", rollout, reward)


def turn(prompt: list[int], output: list[int], mask: list[int] | None = None, version: int = 0) -> Turn:
    return Turn(prompt, output, [-1.0] * len(output), version, mask or [1] * len(output), "stop")


def test_sampled_tokens_are_scored_at_their_positions_and_temperature():
    policy = model()
    two_turns = sample("a", [turn([5, 6, 7], [8, 9]), turn([5, 6, 7, 8, 9, 10], [11, 12, 13], [1, 0, 1])], 1.0)
    one_turn = sample("b", [turn([20, 21], [22])], 0.0)
    batch = completion_logprobs(policy, [two_turns, one_turn], [0.5, 1.0], pad_id=0)

    def direct(prompt, output, temperature):
        with torch.no_grad():
            logits = policy(torch.tensor([prompt + output])).logits[0].float() / temperature
        steps = logits[len(prompt) - 1: len(prompt) + len(output) - 1].log_softmax(-1)
        return steps.gather(1, torch.tensor(output)[:, None]).squeeze(1)

    expected = torch.cat([direct([5, 6, 7], [8, 9], 0.5), direct([5, 6, 7, 8, 9, 10], [11, 12, 13], 0.5)])
    assert torch.allclose(batch.logprobs[0].detach(), expected, atol=1e-5)
    assert torch.allclose(batch.logprobs[1, :1].detach(), direct([20, 21], [22], 1.0), atol=1e-5)
    assert batch.mask.tolist() == [[1, 1, 1, 0, 1], [1, 0, 0, 0, 0]]
    assert batch.behaviour[0].tolist() == [-1.0] * 5


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_micro_batches_add_up_to_the_whole_batch_gradient(loss_type):
    groups = [[sample(f"{g}{i}", [turn([3, 4 + i], [7, 8, 9][: 1 + (i + g) % 3])], float(i % 2), group=f"g{g}")
               for i in range(2)] for g in range(3)]
    kinds = {"t": "prompt"}
    grads = []
    for micro in (6, 1):
        config = RLConfig(num_generations=2, batch_size=6, micro_batch_size=micro, loss_type=loss_type, beta=0.0,
                          steps=1, checkpoint_every=1)
        trainer = PolicyTrainer(model(), config, pad_id=0)
        trainer.optimizer.zero_grad = lambda set_to_none=True: None  # keep the gradient to compare it
        trainer.step(groups, kinds)
        grads.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_a_batch_without_gradient_leaves_the_weights_and_advances_the_version():
    groups = [[sample("a", [turn([3], [4])], 1.0), sample("b", [turn([3], [5])], 1.0)]]
    trainer = PolicyTrainer(model(), RLConfig(num_generations=2, batch_size=2, steps=1, checkpoint_every=1), 0)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    result = trainer.step(groups, {"t": "prompt"})
    assert trainer.version == 1 and result.metrics["zero_variance_groups"] == 1.0
    assert result.untrained == {"a": "equal rewards: no gradient", "b": "equal rewards: no gradient"}
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


def run(tmp_path, steps: int, **config):
    settings = {"steps": steps, "batch_size": 4, "num_generations": 2, "controllers": 2, "concurrency": 2,
                "checkpoint_every": 2, "max_staleness": 1, **config}
    rl = RLRun(tiny_checkpoint(), prompt_tasks(6), RLConfig(**settings), tmp_path / "run",
               engine=VersionedTestEngine(p=[0.5] * 6, latency_median_s=0.01, latency_sigma=1.0),
               launcher=ThreadLauncher())
    return rl, rl.run()


def test_a_resumed_run_continues_the_version_the_counters_and_the_bound(tmp_path):
    first, before = run(tmp_path, steps=2)
    # The killed run had published a version past its checkpoint: it must not reach the resumed engines.
    weights = FileWeightSync(tmp_path / "run" / "weights")
    weights.publish(first.trainer.model.state_dict(), 3)
    resumed = RLRun(tiny_checkpoint(), prompt_tasks(6), RLConfig(steps=4, batch_size=4, num_generations=2,
                                                                  controllers=2, concurrency=2, checkpoint_every=2,
                                                                  max_staleness=1),
                    tmp_path / "run", engine=VersionedTestEngine(p=[0.5] * 6), launcher=ThreadLauncher())
    assert resumed.resumed_from == 2 and resumed.trainer.version == 2
    assert weights.latest() == 2 and not weights.path(3).exists()
    # The admission count continues: what was consumed plus what waits in the queue, never zero.
    waiting = [s for s in resumed.queue.state() if not s.drop_reason]
    assert resumed.manager.accepted == resumed.consumed + len(waiting) == first.consumed + len(waiting)
    assert resumed.manager.accepted >= 2 * 4
    for name, value in first.trainer.model.state_dict().items():
        assert torch.equal(resumed.trainer.model.state_dict()[name], value)
    assert resumed.scheduler.issued > 0 and resumed.scheduler.history  # task ids and pass rates continue

    after = resumed.run()
    assert after.steps["version"].to_list() == [1, 2, 3, 4]
    assert after.samples.height > before.samples.height
    assert after.samples["sample_id"].is_unique().all()  # group ids (and the seeds drawn from them) are not reused
    assert after.samples.filter(after.samples["trained"])["staleness"].max() <= 1
    assert after.steps["wall_s"].is_sorted()


def test_the_synchronous_baseline_trains_every_batch_on_the_version_that_sampled_it(tmp_path):
    _, result = run(tmp_path, steps=3, mode="sync", max_staleness=0, checkpoint_every=3)
    trained = result.samples.filter(result.samples["trained"] | result.samples["drop_reason"].is_not_null())
    assert trained.height > 0
    assert (trained["min_policy_version"] == trained["trainer_version"]).all()
    assert (trained["max_policy_version"] == trained["trainer_version"]).all()


@pytest.mark.parametrize(("settings", "message"), [
    ({"batch_size": 10, "num_generations": 4}, "not divisible by num_generations=4"),
    ({"loss_type": "ppo"}, "loss_type"),
    ({"max_staleness": -1}, "max_staleness"),
    ({"mode": "sync", "max_staleness": 2}, "set max_staleness=0"),
    ({"epsilon": 0.3, "epsilon_high": 0.2}, "epsilon_high"),
])
def test_bad_configs_say_what_to_set(settings, message):
    with pytest.raises(ValidationError, match=message):
        RLConfig(**settings)


class ShortContextTestEngine(VersionedTestEngine):
    """A test double whose context window no prompt fits (as a 4,096-position model with a 10K-token tool list)."""

    max_positions = 8

    def render(self, request) -> list[int]:
        return [0] * 64


class IdleTestEnvironment:
    """A test-double environment: one user message, no tools, reward 0."""

    def __init__(self, record) -> None:
        pass

    async def areset(self, task):
        from envgen.environment import Observation

        return Observation([{"role": "user", "content": "book a room"}], [])

    def score(self):
        from envgen.environment import EpisodeScore

        return EpisodeScore(0.0, {}, None)

    def close(self) -> None:
        pass


def test_a_run_whose_samples_never_reach_the_policy_stops_and_says_why(tmp_path):
    """Every episode overflows the context before the first engine call: nothing can be learned, and the run must say
    so after a few batches instead of publishing versions trained on nothing (it once stalled here for good)."""
    from training.async_rl.run import UNWRITTEN_LIMIT, RLRunError
    from training.async_rl.scheduling import RLTask

    tasks = [RLTask(f"t{i}", "env", "hotel", {"task": {"id": f"t{i}"}, "env": {"env_id": "e"}}) for i in range(4)]
    config = RLConfig(steps=20, batch_size=4, num_generations=2, controllers=1, concurrency=2, max_staleness=1)
    rl = RLRun(tiny_checkpoint(), tasks, config, tmp_path / "run", engine=ShortContextTestEngine(p=[0.5]),
               launcher=ThreadLauncher(), make_env=IdleTestEnvironment)
    with pytest.raises(RLRunError, match=r"before the policy wrote a token \(context_overflow x16\)"):
        rl.run()
    assert rl.trainer.version == UNWRITTEN_LIMIT  # far past max_staleness: the samples were not dropped as stale


def engine_samples(top_p: float, n: int = 4) -> tuple[object, list]:
    """Samples the transformers engine drew at ``top_p`` (temperature 1), with its sampling logprobs, version 0."""
    from inference.engine import Request, SamplingParams
    from inference.hf_engine import HFEngine

    engine = HFEngine.load(tiny_checkpoint())
    request = Request([{"role": "user", "content": "Which city lies on the river?"}],
                      sampling=SamplingParams(temperature=1.0, top_p=top_p, max_tokens=12, n=n, seed=3))
    [completions] = engine.generate([request])
    samples = [sample(f"s{i}", [Turn(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), 0,
                                     [1] * len(c.token_ids), "stop")], float(i % 2))
               for i, c in enumerate(completions)]
    return engine, samples


def test_at_equal_weights_every_token_ratio_is_one_under_top_p():
    """The engine samples from the top-p-processed distribution and reports its logprobs; the trainer scores the
    same distribution, so on-policy ratios are 1 (scored at temperature only they were ~0.95 at top-p 0.95)."""
    engine, samples = engine_samples(top_p=0.7)
    batch = completion_logprobs(engine.model, samples, [1.0] * len(samples), engine.pad_id, top_p=0.7)
    valid = batch.mask.bool()
    gap = (batch.logprobs.detach() - batch.behaviour)[valid]
    assert valid.sum() > 20 and gap.abs().max() < 1e-4
    truncation_ignored = completion_logprobs(engine.model, samples, [1.0] * len(samples), engine.pad_id)
    assert (truncation_ignored.logprobs.detach() - batch.behaviour)[valid].mean() < -1e-2  # the bias it had
    config = RLConfig(num_generations=2, batch_size=4, steps=1, checkpoint_every=1, beta=0.0,
                      sampling={"top_p": 0.7})
    metrics = PolicyTrainer(engine.model, config, engine.pad_id).step([samples[:2], samples[2:]],
                                                                       {"t": "prompt"}).metrics
    assert abs(metrics["ratio_on_policy"] - 1.0) < 1e-4 and abs(metrics["ratio_mean"] - 1.0) < 1e-4


def test_the_gspo_clip_binds_once_the_policy_has_moved():
    """The GSPO paper's sequence-level range (3e-4 / 4e-4, the default at sequence level) clips the samples of the
    previous version after one step; the token-level 0.2 / 0.28 at sequence level never did."""
    clipped = {}
    for name, extra in {"gspo": {}, "token_range": {"epsilon": 0.2, "epsilon_high": 0.28}}.items():
        engine, samples = engine_samples(top_p=1.0, n=8)
        config = RLConfig(num_generations=2, batch_size=8, steps=2, checkpoint_every=2, beta=0.0,
                          sampling={"top_p": 1.0}, **extra)
        trainer = PolicyTrainer(engine.model, config, engine.pad_id)
        groups = [samples[i:i + 2] for i in range(0, 8, 2)]
        first = trainer.step(groups, {"t": "prompt"}).metrics
        clipped[name] = (first["clip_ratio"], trainer.step(groups, {"t": "prompt"}).metrics["clip_ratio"])
    assert RLConfig().epsilon == 3e-4 and RLConfig().epsilon_high == 4e-4
    assert RLConfig(importance_sampling_level="token").epsilon == 0.2
    assert clipped["gspo"][0] == 0.0 and clipped["gspo"][1] > 0.0  # on-policy nothing is clipped; one step on, it is
    assert clipped["token_range"] == (0.0, 0.0)

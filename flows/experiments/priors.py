"""Prior-only baselines: what a policy scores on the held-out prompt tasks without reading them, from the answers
its training data holds alone.

A difficulty filter keeps what a guessing reference gets right, so a trained arm can look like it learned by
learning the answer distribution. Two baselines bound that: always give the most common training answer, and give
an answer drawn from the training answers at their frequencies. Both are exact expectations under the held-out
tasks' own rewards (no sampling): the most common answer scores its reward, a drawn answer the frequency-weighted
mean of every distinct answer's reward. Environment tasks have no answer prior and are left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import polars as pl

from training.async_rl.scheduling import RLTask
from training.records import HELDOUT_SCORE

MOST_COMMON, SAMPLED = "most common training answer", "training answer drawn at its frequency"


def _normal(answer: str) -> str:
    return " ".join(str(answer).split()).casefold()


def _reward(task: RLTask, answer: str) -> float:
    from envgen.rewards import get_reward

    [reward] = get_reward(task.payload["reward_fn"])(
        [[{"role": "assistant", "content": f"\\boxed{{{answer}}}"}]], answer=[task.payload["answer"]],
        aliases=[list(task.payload.get("aliases") or [])])
    return float(reward or 0.0)


def prior_scores(train: Sequence[RLTask], heldout: Sequence[RLTask]) -> dict[str, pl.DataFrame]:
    """baseline -> heldout_score rows (one per held-out prompt task, its expected reward); empty when the training
    data holds no answers or the held-out set no prompt tasks."""
    counts = Counter(_normal(t.payload["answer"]) for t in train if t.kind == "prompt")
    prompts = [t for t in heldout if t.kind == "prompt"]
    if not counts or not prompts:
        return {}
    spelled = {_normal(t.payload["answer"]): str(t.payload["answer"]) for t in train if t.kind == "prompt"}
    total = sum(counts.values())
    common = max(counts, key=lambda a: (counts[a], a))
    rows: dict[str, list[dict]] = {MOST_COMMON: [], SAMPLED: []}
    for task in prompts:
        rewards = {answer: _reward(task, spelled[answer]) for answer in counts}
        expected = {MOST_COMMON: rewards[common], SAMPLED: sum(counts[a] * r for a, r in rewards.items()) / total}
        for name, reward in expected.items():
            rows[name].append({"task_id": task.task_id, "source": task.source, "kind": task.kind,
                               "noise_level": task.noise_level, "clean_task_id": task.clean_task_id, "sample": 0,
                               "reward": reward})
    return {name: HELDOUT_SCORE.frame(r) for name, r in rows.items()}

"""Test doubles for the experiment runner: a scripted trainer whose arms differ by a known effect size, so the
statistics can be checked against the truth. Never a default a user gets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from flows.experiments.config import Experiment
from flows.experiments.core import ArmRun
from training.records import HELDOUT_SCORE

SCRIPTED = Experiment(
    name="scripted", title="a scripted trainer with a known effect", claim="test double", expected="a > b",
    arms={"a": {"description": "gets the effect", "train_on": ["none"]},
          "b": {"description": "the baseline", "train_on": ["none"]}},
    evaluation={"heldout": ["none"], "score": {"k": 4}},
    statistics={"metrics": ["mean_reward"], "resamples": 500})


@dataclass
class ScriptedTrainer:
    """Test double: a "trained model" of arm a solves held-out task t with probability p_t + effect + its run's
    offset, arm b with p_t + its run's offset. p_t is drawn once per replicate (the held-out set), the run offset
    once per (arm, seed) with sd ``seed_sd`` (training-run variance), each of k attempts is a Bernoulli draw."""

    effect: float
    replicate: int = 0
    tasks: int = 32
    k: int = 4
    seed_sd: float = 0.05

    def __post_init__(self) -> None:
        self.difficulty = np.random.default_rng([self.replicate, 0]).uniform(0.1, 0.6, self.tasks)

    def run(self, experiment: Experiment, arm: str, seed: int, profile: str) -> ArmRun:
        rng = np.random.default_rng([self.replicate, 1 + seed, ord(arm[0])])
        p = np.clip(self.difficulty + (self.effect if arm == "a" else 0.0) + rng.normal(0.0, self.seed_sd), 0, 1)
        rewards = rng.random((self.tasks, self.k)) < p[:, None]
        rows = [{"task_id": f"t{t}", "source": "qa" if t % 2 else "keychain", "kind": "prompt", "noise_level": 0,
                 "clean_task_id": None, "sample": i, "reward": float(rewards[t, i])}
                for t in range(self.tasks) for i in range(self.k)]
        curve = pl.DataFrame({"x": [16.0, 32.0, 48.0], "y": [float(p.mean()) * f for f in (0.5, 0.75, 1.0)]})
        return ArmRun(arm, seed, HELDOUT_SCORE.frame(rows), curve)

    def score_base(self, experiment: Experiment, profile: str) -> pl.DataFrame | None:
        return None

    def priors(self, experiment: Experiment, profile: str) -> dict[str, pl.DataFrame]:
        """A guess that scores 0.1 on every held-out task (a prior-only baseline of known value)."""
        rows = [{"task_id": f"t{t}", "source": "qa" if t % 2 else "keychain", "kind": "prompt", "noise_level": 0,
                 "clean_task_id": None, "sample": 0, "reward": 0.1} for t in range(self.tasks)]
        return {"guess": HELDOUT_SCORE.frame(rows)}

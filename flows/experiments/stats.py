"""The statistics of an experiment: an arm's score and the difference of two arms, with intervals that count both
sources of variation a training experiment has — which held-out tasks were drawn, and which training run (seed) an
arm happened to get.

Data: per arm a matrix ``scores[seed, task]`` (a metric's value of one trained model on one held-out unit: a task's
mean reward over its k attempts, its Pass@k, a clean/noisy gap). Both arms are scored on the same units, so units
pair across arms; seeds do not (each arm's run with seed s is its own training run).

- ``hierarchical_bootstrap``: resample seeds within each arm and units (the same draw for both arms: paired), the
  difference of the means per draw; percentile interval. Resampling the runs keeps seed variance in the interval,
  which a bootstrap over tasks alone would hide (an arm whose one lucky run lifts every task looks significant).
  With few seeds the percentile interval of the seed level is narrow by a factor sqrt((n-1)/n); the seed-level
  draws are widened by that factor (the bootstrap's small-sample correction), so the false-positive rate stays
  near alpha (tests/flows/test_experiments.py measures it).
- ``paired_permutation``: the sign-flip test over units of the seed-averaged differences; exact for the unit level
  but blind to seed variance, so honest only when runs are deterministic (one seed, or scores of fixed models).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from inference.metrics import Estimate, paired_bootstrap_ci, percentile_interval

Test = Literal["hierarchical_bootstrap", "paired_permutation"]


@dataclass(frozen=True)
class Comparison:
    """Arm ``a`` minus arm ``b`` on one metric."""

    a: str
    b: str
    a_score: Estimate
    b_score: Estimate
    difference: Estimate
    p_value: float
    alpha: float
    test: Test
    seeds: tuple[int, int]
    units: int

    @property
    def significant(self) -> bool:
        return self.p_value < self.alpha

    @property
    def verdict(self) -> str:
        """``a > b``, ``a < b`` or ``no difference detected``: what the interval supports, nothing more."""
        if not self.significant:
            return "no difference detected"
        return f"{self.a} > {self.b}" if self.difference.value > 0 else f"{self.a} < {self.b}"


def _check(a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("scores are matrices [seed, unit]")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the arms are scored on different units: {a.shape[1]} vs {b.shape[1]}")
    if a.size == 0 or b.size == 0:
        raise ValueError("an arm without scores")


def _seed_draws(rng: np.random.Generator, n: int, resamples: int) -> np.ndarray:
    return rng.integers(0, n, size=(resamples, n))


def _resampled_means(scores: np.ndarray, seeds: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Mean of ``scores`` over each draw's seeds and units, the seed level widened by sqrt(n/(n-1)) around the
    draw's unit mean (the small-sample correction of the module docstring)."""
    n = scores.shape[0]
    per_seed = scores[:, units].mean(axis=2)  # [seed, draw]: each seed's mean over the draw's units
    picked = per_seed[seeds.T, np.arange(seeds.shape[0])[None, :]]  # [n, resamples]
    centre = per_seed.mean(axis=0)
    spread = np.sqrt(n / (n - 1)) if n > 1 else 1.0
    return centre + spread * (picked.mean(axis=0) - centre)


def compare(a: np.ndarray, b: np.ndarray, names: tuple[str, str] = ("A", "B"), *, test: Test =
            "hierarchical_bootstrap", resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> Comparison:
    """The difference of arm means (a - b) over paired units, with its interval and a two-sided p-value."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    _check(a, b)
    rng = np.random.default_rng(seed)
    alpha = 1.0 - confidence
    n_units = a.shape[1]
    units = rng.integers(0, n_units, size=(resamples, n_units))
    ma = _resampled_means(a, _seed_draws(rng, a.shape[0], resamples), units)
    mb = _resampled_means(b, _seed_draws(rng, b.shape[0], resamples), units)

    def score(x: np.ndarray, draws: np.ndarray) -> Estimate:  # a mean stays within its values' range
        return Estimate(float(x.mean()), *percentile_interval(np.clip(draws, x.min(), x.max()), confidence), n_units)

    diff = ma - mb
    if test == "hierarchical_bootstrap":
        interval = Estimate(float(a.mean() - b.mean()), *percentile_interval(diff, confidence), n_units)
        # two-sided: twice the share of draws on the far side of zero (the interval excludes 0 iff p < alpha)
        p = min(1.0, 2 * min(float((diff <= 0).mean()), float((diff >= 0).mean())))
    else:
        d = a.mean(axis=0) - b.mean(axis=0)
        flips = rng.choice([-1.0, 1.0], size=(resamples, n_units))
        null = (flips * d).mean(axis=1)
        p = float((np.abs(null) >= abs(d.mean()) - 1e-12).mean())
        interval = paired_bootstrap_ci(a.mean(axis=0).tolist(), b.mean(axis=0).tolist(), resamples, confidence, seed)
    return Comparison(names[0], names[1], score(a, ma), score(b, mb), interval, p, alpha, test,
                      (a.shape[0], b.shape[0]), n_units)

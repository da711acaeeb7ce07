"""Evaluation metrics, pure functions: unbiased Pass@k, Avg@k, bootstrap confidence intervals, majority vote.

- ``pass_at_k(n, c, k)`` is the unbiased estimator of the chance that at least one of ``k`` samples is correct,
  from ``n >= k`` samples of which ``c`` are correct (Chen et al. 2021, "Evaluating Large Language Models Trained on
  Code"): ``1 - C(n - c, k) / C(n, k)``. Taking the first ``k`` samples instead is unbiased too but wastes the rest.
- ``avg_at_k`` is the mean per-sample score over ``k`` samples per item (LongCat-Flash-Thinking-2601 section 5.1
  reports Avg@4 for small benchmarks, to reduce sampling variance).
- ``bootstrap_ci`` resamples items with replacement (percentile interval); ``paired_bootstrap_ci`` resamples the
  same items for two systems, so a difference carries the per-item correlation (a robustness gap: clean vs noisy
  twin of one task; a comparison: model A vs B on one suite).
- ``majority_vote`` is self-consistency: the most frequent answer; a tie goes to the answer seen first, so the
  vote is deterministic given the sample order; samples without an answer do not vote.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k from ``n`` samples with ``c`` correct: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 <= c <= n:
        raise ValueError(f"correct samples c={c} must be within 0..n (n={n})")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must be within 1..n (n={n}): Pass@k needs at least k samples")
    if n - c < k:
        return 1.0
    # The product form avoids the huge binomials of large n: prod_{i=n-c+1}^{n} (1 - k / i).
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def avg_at_k(scores: Sequence[float]) -> float:
    """Mean per-sample score (Avg@k with ``k = len(scores)``)."""
    if not scores:
        raise ValueError("Avg@k of no samples")
    return sum(scores) / len(scores)


def majority_vote(answers: Sequence[T | None]) -> tuple[T | None, int]:
    """``(answer, votes)``: the most frequent non-None answer, ties to the one seen first; ``(None, 0)`` when no
    sample answered."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0
    best = max(counts.values())
    winner = next(a for a in answers if a is not None and counts[a] == best)
    return winner, best


@dataclass(frozen=True)
class Estimate:
    """A statistic with its bootstrap percentile interval."""

    value: float
    lo: float
    hi: float
    n: int

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.lo:.3f}, {self.hi:.3f}] (n={self.n})"


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def bootstrap_ci(values: Sequence[float], statistic: Callable[[Sequence[float]], float] = mean,
                 resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> Estimate:
    """``statistic`` of ``values`` (one per item) with a percentile bootstrap interval over items."""
    if not values:
        raise ValueError("a confidence interval of no items")
    _check(resamples, confidence)
    rng = random.Random(seed)
    n = len(values)
    stats = [statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples)]
    return Estimate(statistic(values), *percentile_interval(stats, confidence), n)


def paired_bootstrap_ci(a: Sequence[float], b: Sequence[float], resamples: int = 1000, confidence: float = 0.95,
                        seed: int = 0) -> Estimate:
    """Mean of ``a - b`` over paired items (the same item under two systems or conditions), resampling items."""
    if len(a) != len(b):
        raise ValueError(f"paired values differ in length: {len(a)} vs {len(b)}")
    return bootstrap_ci([x - y for x, y in zip(a, b, strict=True)], mean, resamples, confidence, seed)


def _check(resamples: int, confidence: float) -> None:
    if resamples < 1:
        raise ValueError(f"resamples={resamples}: must be at least 1")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: must be within (0, 1)")


def percentile_interval(draws: Iterable[float], confidence: float) -> tuple[float, float]:
    """The percentile interval of bootstrap draws: the draws at the ``(1 - confidence) / 2`` quantiles."""
    ordered = sorted(float(d) for d in draws)
    tail = (1 - confidence) / 2
    last = len(ordered) - 1
    return ordered[round(tail * last)], ordered[round((1 - tail) * last)]


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """The value at ``x`` on the piecewise-linear curve through ``points`` (x ascending), linear in log x (budget
    curves double K per point); None outside the curve: a budget the strategy was not measured at."""
    if not points:
        return None
    ordered = sorted(points)
    if x < ordered[0][0] or x > ordered[-1][0]:
        return None
    for (x0, y0), (x1, y1) in pairwise(ordered):
        if x0 <= x <= x1:
            if x1 == x0:
                return y1
            lx0, lx1, lx = (math.log(max(v, 1e-9)) for v in (x0, x1, x))
            return y0 + (y1 - y0) * (lx - lx0) / (lx1 - lx0)
    return ordered[-1][1]

"""Weighted K-Center-Greedy (LongCat-Flash-Thinking-2601 3.1.2: "the distance between a candidate sample and the
currently selected set is weighted by this sliding-window perplexity score").

Each step picks ``argmax_i w_i * min_{s in S} ||x_i - x_s||`` over the unselected points (ties: the lowest index);
the first pick, with S empty, is ``argmax_i w_i``. With all weights equal it is plain K-Center-Greedy (coverage of
the embedding space); larger weights pull high-perplexity samples forward.

``k_center_greedy`` gives the order of ``k_center_greedy_naive`` (the O(n k) numpy loop: every step measures every
point against the new center by subtracting it, an n x d temporary) from one BLAS matrix-vector pass per step
(||x||^2 + ||c||^2 - 2 x.c) with every other step operation in place. Skipping groups of points by the triangle
inequality was measured too and lost: 384-d sentence embeddings are too spread for the bound to prune, so the
per-group passes cost more than the one pass (bench/bench_midtrain.py measures the two kept variants on 100,000
candidates).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _distances(points: np.ndarray, center: np.ndarray) -> np.ndarray:
    diff = points - center
    return np.sqrt(np.einsum("ij,ij->i", diff, diff))


def _first(weights: np.ndarray) -> int:
    return int(np.argmax(weights))


def k_center_greedy_naive(x: np.ndarray, k: int, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The baseline: (picks in order, each point's distance to its nearest pick)."""
    n = len(x)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    k = min(k, n)
    picks = np.empty(k, dtype=np.int64)
    nearest = np.full(n, np.inf)
    selected = np.zeros(n, dtype=bool)
    for step in range(k):
        if step == 0:
            pick = _first(w)
        else:
            value = w * nearest
            value[selected] = -np.inf
            pick = int(np.argmax(value))
        picks[step], selected[pick] = pick, True
        nearest = np.minimum(nearest, _distances(x, x[pick]))
    return picks, nearest


def k_center_greedy(x: np.ndarray, k: int, weights: np.ndarray | None = None, groups: np.ndarray | None = None,
                    quotas: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(picks in order, each point's distance to its nearest pick): the order of ``k_center_greedy_naive`` (up to
    ties within float rounding, since distances come from dot products).

    With ``groups`` (a group index per point) and ``quotas`` (picks per group), a group whose quota is filled takes
    no more picks, while its picks still cover every group's points: one selection covers the whole pool in the
    given mixture (per-group selections would each cover only their own group, and cover it twice where groups
    meet)."""
    n = len(x)
    if quotas is not None:  # a group holds at most its points
        k = min(k, int(np.minimum(quotas, np.bincount(groups, minlength=len(quotas))).sum()))
    k = min(k, n)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite and non-negative")
    left = None if quotas is None else np.asarray(quotas, dtype=np.int64).copy()
    closed = np.zeros(n, dtype=bool) if left is None else left[groups] <= 0
    squares = np.einsum("ij,ij->i", x, x).astype(np.float64)
    picks = np.empty(k, dtype=np.int64)
    nearest = np.full(n, np.inf)
    value = w.copy()  # w * distance to the selected set; with none selected yet, w itself (the first pick)
    value[closed] = -np.inf
    for step in range(k):
        pick = int(np.argmax(value))  # the first maximum: ties go to the lowest index, as in the naive loop
        picks[step] = pick
        if left is not None:
            left[groups[pick]] -= 1
            if left[groups[pick]] <= 0:
                closed |= groups == groups[pick]
        center = x[pick]
        distance = squares + float(center @ center)
        distance -= 2.0 * (x @ center)
        np.maximum(distance, 0.0, out=distance)
        np.sqrt(distance, out=distance)
        np.minimum(nearest, distance, out=nearest)
        np.multiply(w, nearest, out=value)
        value[picks[:step + 1]] = -np.inf
        value[closed] = -np.inf
    return picks, nearest


def k_center_greedy_brute(x: np.ndarray, k: int, weights: np.ndarray | None = None) -> np.ndarray:
    """The definition, recomputed from scratch at every step (O(n k^2)): for tests on small inputs."""
    n = len(x)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    picks: list[int] = []
    for _ in range(min(k, n)):
        best, best_value = None, -np.inf
        for i in range(n):
            if i in picks:
                continue
            d = min((float(np.sqrt(np.sum((x[i] - x[s]) ** 2))) for s in picks), default=np.inf)
            value = w[i] if not picks else w[i] * d
            if value > best_value or best is None:
                best, best_value = i, value
        picks.append(best)
    return np.array(picks, dtype=np.int64)

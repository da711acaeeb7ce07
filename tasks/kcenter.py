"""Weighted K-Center-Greedy (LongCat-Flash-Thinking-2601 3.1.2: "the distance between a candidate sample and the
currently selected set is weighted by this sliding-window perplexity score").

Each step picks ``argmax_i w_i * min_{s in S} ||x_i - x_s||`` over the unselected points (ties: the lowest index);
the first pick, with S empty, is ``argmax_i w_i``. With all weights equal it is plain K-Center-Greedy (coverage of
the embedding space); larger weights pull high-perplexity samples forward.

``k_center_greedy`` gives the order of ``k_center_greedy_naive`` (the O(n k) numpy loop: every step measures every
point against the new center) with two savings: distances come from one BLAS matrix-vector pass (||x||^2 + ||c||^2
- 2 x.c, no temporary copy of the points), and whole groups of points the new center cannot come closer to are
skipped: points are grouped around anchors, and by the triangle inequality a group whose nearest possible member is
farther from the new center than its farthest member's current distance keeps every distance unchanged
(bench/bench_midtrain.py measures both on 100,000 candidates).
"""

from __future__ import annotations

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


def _dot_distances(points: np.ndarray, squares: np.ndarray, center: np.ndarray) -> np.ndarray:
    """Euclidean distances by ||x||^2 + ||c||^2 - 2 x.c: one BLAS pass over the points, no temporary copy."""
    return np.sqrt(np.maximum(squares + center @ center - 2.0 * (points @ center), 0.0))


def k_center_greedy(x: np.ndarray, k: int, weights: np.ndarray | None = None,
                    groups: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(picks in order, each point's distance to its nearest pick): the order of ``k_center_greedy_naive`` (up to
    ties within float rounding, since distances come from dot products)."""
    n = len(x)
    k = min(k, n)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite and non-negative")
    picks = np.empty(k, dtype=np.int64)
    if k == 0:
        return picks, np.full(n, np.inf)
    m = max(1, min(n, groups or int(np.sqrt(n))))
    anchors = x[np.linspace(0, n - 1, m).astype(np.int64)]
    anchor_sq = np.einsum("ij,ij->i", anchors, anchors)
    squares = np.einsum("ij,ij->i", x, x)
    owner = np.empty(n, dtype=np.int64)
    for start in range(0, n, 8192):  # nearest anchor of every point, in blocks (never n x m at once)
        block = x[start:start + 8192]
        owner[start:start + 8192] = np.argmin(anchor_sq[None, :] - 2.0 * block @ anchors.T, axis=1)
    order = np.lexsort((np.arange(n), owner))  # grouped, each group in index order (ties go to the lowest index)
    xs, ws, sq = np.ascontiguousarray(x[order]), w[order], squares[order]
    bounds = np.searchsorted(owner[order], np.arange(m + 1))
    radius = np.array([_dot_distances(xs[bounds[g]:bounds[g + 1]], sq[bounds[g]:bounds[g + 1]], anchors[g])
                       .max(initial=0.0) for g in range(m)])
    # Dot-product distances of float32 unit vectors are off by up to ~1e-3: a group is skipped only with room.
    slack = 1e-3 if x.dtype == np.float32 else 1e-9
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    nearest = np.full(n, np.inf)
    selected = np.zeros(n, dtype=bool)
    farthest = np.full(m, np.inf)  # per group: the largest current distance of a member
    best_value = np.full(m, -np.inf)
    best_index = np.full(m, n, dtype=np.int64)  # original index of each group's best member
    for step in range(k):
        pick = _first(w) if step == 0 else int(best_index[best_value == best_value.max()].min())
        picks[step] = pick
        selected[position[pick]] = True
        center = xs[position[pick]]
        gap = _dot_distances(anchors, anchor_sq, center)
        # Triangle inequality: no member of group g is nearer the new center than gap - radius; a group whose
        # farthest member is already nearer than that to the selected set keeps every distance.
        for g in np.nonzero(gap - radius - slack < farthest)[0]:
            lo, hi = bounds[g], bounds[g + 1]
            if lo == hi:
                continue
            near = np.minimum(nearest[lo:hi], _dot_distances(xs[lo:hi], sq[lo:hi], center))
            nearest[lo:hi] = near
            farthest[g] = near.max()
            value = ws[lo:hi] * near
            value[selected[lo:hi]] = -np.inf
            j = int(np.argmax(value))
            best_value[g], best_index[g] = value[j], order[lo + j]
    out = np.empty(n)
    out[order] = nearest
    return picks, out


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

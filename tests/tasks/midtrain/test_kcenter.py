"""Weighted K-Center-Greedy: the exact greedy order (against the definition recomputed by brute force and the naive
loop), and the weighting changes the order as specified."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tasks.midtrain.kcenter import k_center_greedy, k_center_greedy_brute, k_center_greedy_naive


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 24), dim=st.integers(1, 4))
def test_picks_are_the_exact_greedy_order(data, n: int, dim: int) -> None:
    # Small integer coordinates: every distance is computed exactly, ties included (ties go to the lowest index).
    x = data.draw(arrays(np.float64, (n, dim), elements=st.integers(-3, 3).map(float)))
    weights = data.draw(st.none() | arrays(np.float64, n, elements=st.integers(0, 4).map(float)))
    k = data.draw(st.integers(0, n))
    fast, nearest = k_center_greedy(x, k, weights)
    assert fast.tolist() == k_center_greedy_brute(x, k, weights).tolist()
    naive, naive_nearest = k_center_greedy_naive(x, k, weights)
    assert fast.tolist() == naive.tolist()
    assert np.allclose(nearest, naive_nearest)


@given(d_near=st.floats(1.0, 5.0), ratio=st.floats(1.1, 4.0))
def test_the_weight_multiplies_the_distance_to_the_selected_set(d_near: float, ratio: float) -> None:
    # The first pick is the heaviest point; then the farther candidate wins unweighted, and the nearer one wins as
    # soon as its weight times its distance exceeds the farther one's.
    d_far = d_near * ratio
    x = np.array([[0.0], [d_far], [-d_near]])
    plain, _ = k_center_greedy(x, 2, np.array([1.0, 1.0, 1.0]) * [2, 1, 1])
    assert plain.tolist() == [0, 1]
    heavy = ratio * 1.01
    weighted, _ = k_center_greedy(x, 2, np.array([heavy + 1, 1.0, heavy]))
    assert weighted.tolist() == [0, 2]
    assert k_center_greedy_brute(x, 2, np.array([heavy + 1, 1.0, heavy])).tolist() == [0, 2]


def test_clustered_float32_embeddings_match_the_naive_loop() -> None:
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(20, 32))
    x = (centers[rng.integers(0, 20, 2000)] + 0.3 * rng.normal(size=(2000, 32))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.uniform(1, 3, 2000)
    assert k_center_greedy(x, 150, w)[0].tolist() == k_center_greedy_naive(x, 150, w)[0].tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(0, 6), min_size=1, max_size=4), st.integers(1, 30))
def test_quotas_bound_each_group_and_every_pick_covers_every_group(seed: int, quotas: list[int], k: int) -> None:
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, len(quotas), size=40)
    x = rng.normal(size=(40, 5))
    picks, nearest = k_center_greedy(x, k, rng.uniform(0.5, 1.0, size=40), groups, quotas)
    per_group = [min(q, int((groups == g).sum())) for g, q in enumerate(quotas)]
    assert len(set(picks.tolist())) == len(picks) == min(k, sum(per_group))
    assert all(int((groups[picks] == g).sum()) <= q for g, q in enumerate(quotas))
    if len(picks) == sum(per_group):
        assert [int((groups[picks] == g).sum()) for g in range(len(quotas))] == per_group
    # distances are to the nearest pick of any group
    expected = np.min(np.linalg.norm(x[:, None] - x[picks][None], axis=-1), axis=1) if len(picks) else nearest
    assert np.allclose(nearest, expected, atol=1e-6)

"""The evaluation metrics: the unbiased Pass@k estimator against brute force, majority-vote ties, bootstrap
intervals, and the budget-curve interpolation."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference.metrics import (
    avg_at_k,
    bootstrap_ci,
    interpolate,
    majority_vote,
    paired_bootstrap_ci,
    pass_at_k,
)


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_the_share_of_k_subsets_holding_a_correct_sample(case):
    n, c, k = case
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_the_binomial_form_and_is_monotone_in_k(case):
    n, c, k = case
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-9)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= pass_at_k(n, c, k) - 1e-12
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_avg_at_k_is_the_mean_score():
    assert avg_at_k([1.0, 0.0, 1.0, 1.0]) == 0.75
    with pytest.raises(ValueError):
        avg_at_k([])


@pytest.mark.parametrize(("answers", "expected"), [
    (["a", "b", "b", "a"], ("a", 2)),          # a tie goes to the answer seen first
    (["b", "a", "a", "b"], ("b", 2)),
    ([None, "x", None], ("x", 1)),              # samples without an answer do not vote
    ([None, None], (None, 0)),
    (["c", "a", "b", "a"], ("a", 2)),
])
def test_majority_vote_ties_go_to_the_first_seen(answers, expected):
    assert majority_vote(answers) == expected


@given(st.lists(st.one_of(st.none(), st.sampled_from("abcd")), min_size=1, max_size=12))
def test_majority_vote_returns_a_most_frequent_answer_seen_first(answers):
    winner, votes = majority_vote(answers)
    counts = {a: answers.count(a) for a in answers if a is not None}
    if not counts:
        assert (winner, votes) == (None, 0)
        return
    assert votes == max(counts.values()) == counts[winner]
    first = next(a for a in answers if a is not None and counts[a] == votes)
    assert winner == first


def test_bootstrap_interval_covers_the_true_mean_about_as_often_as_it_says():
    rng = random.Random(0)
    covered = 0
    for trial in range(100):
        values = [float(rng.random() < 0.3) for _ in range(80)]
        est = bootstrap_ci(values, resamples=300, seed=trial)
        assert est.lo <= est.value <= est.hi
        covered += est.lo <= 0.3 <= est.hi
    assert covered >= 85  # nominal 95%: far fewer would mean intervals that are too narrow


def test_paired_interval_is_of_the_differences():
    est = paired_bootstrap_ci([1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], resamples=200)
    assert est.value == pytest.approx(0.5) and est.n == 4
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0], [1.0, 0.0])


def test_interpolate_is_linear_in_log_budget_and_absent_outside_the_curve():
    curve = [(100.0, 0.2), (400.0, 0.6)]
    assert interpolate(curve, 200.0) == pytest.approx(0.4)  # halfway in log2: 100 -> 200 -> 400
    assert interpolate(curve, 100.0) == pytest.approx(0.2) and interpolate(curve, 400.0) == pytest.approx(0.6)
    assert interpolate(curve, 50.0) is None and interpolate(curve, 800.0) is None and interpolate([], 1.0) is None

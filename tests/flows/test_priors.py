"""Prior-only baselines: exact expected rewards of answering from the training answers, and their place in a
write-up."""

from __future__ import annotations

import pytest
from experiment_fixtures import SCRIPTED, ScriptedTrainer
from hypothesis import given
from hypothesis import strategies as st

from flows.experiments import writeup
from flows.experiments.core import run_experiment
from flows.experiments.priors import MOST_COMMON, SAMPLED, prior_scores
from training.async_rl.scheduling import RLTask

CITIES = ["Niue", "Oslo", "Lima", "Quito", "Hanoi"]


def prompt(task_id: str, answer: str) -> RLTask:
    return RLTask(task_id, "prompt", "keychain", {"prompt": [{"role": "user", "content": "?"}], "answer": answer,
                                                  "aliases": [], "reward_fn": "two_way"})


def test_most_common_and_drawn_answers_score_their_exact_expectation():
    train = [prompt(f"t{i}", a) for i, a in enumerate(["Niue", "Niue", "niue ", "Oslo"])]
    heldout = [prompt("h0", "Niue"), prompt("h1", "Oslo"), prompt("h2", "Lima")]
    scores = prior_scores(train, heldout)
    assert scores[MOST_COMMON]["reward"].to_list() == [1.0, 0.0, 0.0]
    assert scores[SAMPLED]["reward"].to_list() == pytest.approx([0.75, 0.25, 0.0])


@given(train=st.lists(st.sampled_from(CITIES), min_size=1, max_size=20),
       heldout=st.lists(st.sampled_from(CITIES), min_size=1, max_size=10))
def test_drawn_answer_expectation_is_the_training_frequency_of_the_gold(train, heldout):
    scores = prior_scores([prompt(f"t{i}", a) for i, a in enumerate(train)],
                          [prompt(f"h{i}", a) for i, a in enumerate(heldout)])
    assert scores[SAMPLED]["reward"].to_list() == pytest.approx([train.count(g) / len(train) for g in heldout])
    top = max(train.count(a) for a in train)
    assert all(r in (0.0, 1.0) for r in scores[MOST_COMMON]["reward"])
    assert sum(scores[MOST_COMMON]["reward"]) <= sum(train.count(g) == top for g in heldout)


def test_no_answers_no_baseline():
    env = RLTask("e0", "env", "airline", {"env": {}, "task": {}})
    assert prior_scores([env], [prompt("h0", "Niue")]) == {}
    assert prior_scores([prompt("t0", "Niue")], [env]) == {}


def test_a_writeup_lists_the_baselines_beside_the_arms():
    result = run_experiment(SCRIPTED, ScriptedTrainer(effect=0.2), seeds=2)
    [(label, estimates)] = result.priors.items()
    assert label == "guess" and estimates[("mean_reward", "all")].value == pytest.approx(0.1)
    page = writeup.markdown(result)
    assert "Prior-only baselines" in page and "| guess | mean_reward | all | 0.100" in page

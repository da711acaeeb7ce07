"""The experiments' statistics are honest: on a scripted trainer with a known effect the comparison finds
it (the interval covers the truth and excludes 0), on a null effect it finds nothing at about the declared rate
alpha; metrics pair the right units; the write-up states what the interval supports; every declared experiment is
valid, and a bad one is refused before anything runs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from experiment_fixtures import SCRIPTED, ScriptedTrainer
from hypothesis import given, settings
from hypothesis import strategies as st

from data_contracts.stage import StageError
from flows.experiments import writeup
from flows.experiments.core import run_experiment, unit_values
from flows.experiments.declared import EXPERIMENTS
from flows.experiments.stats import compare
from training.records import HELDOUT_SCORE


def test_a_known_effect_is_detected_and_its_interval_covers_the_truth():
    result = run_experiment(SCRIPTED, ScriptedTrainer(effect=0.25), seeds=3)
    [c] = result.primary
    assert c.significant and c.verdict == "a > b"
    assert c.difference.lo > 0 and c.difference.lo < 0.25 < c.difference.hi
    assert "Reproduced" in writeup.conclusion(result)


def test_power_and_false_positive_rate_over_many_replicates():
    """200 replicated experiments under a null effect reject at about alpha (0.05; the 99% binomial bound of 200
    draws is 0.09), and a moderate effect is found in most replicates."""
    def rejections(effect: float, replicates: int) -> float:
        return float(np.mean([run_experiment(SCRIPTED, ScriptedTrainer(effect, replicate=r), seeds=3,
                                             stats_seed=r).primary[0].significant for r in range(replicates)]))

    assert rejections(0.0, 200) <= 0.09
    assert rejections(0.2, 40) >= 0.8


def test_run_to_run_variance_widens_the_interval():
    """One lucky training run must not look like an effect: with large seed variance and no true effect, a test
    over tasks alone rejects far more often than alpha, the hierarchical bootstrap does not."""
    def rate(test: str) -> float:
        hits = []
        for r in range(60):
            trainer = ScriptedTrainer(0.0, replicate=r, seed_sd=0.15)
            a = np.array([trainer.run(SCRIPTED, "a", s, "tiny").scores.group_by("task_id").agg(pl.col("reward").mean())
                          .sort("task_id")["reward"].to_numpy() for s in range(3)])
            b = np.array([trainer.run(SCRIPTED, "b", s, "tiny").scores.group_by("task_id").agg(pl.col("reward").mean())
                          .sort("task_id")["reward"].to_numpy() for s in range(3)])
            hits.append(compare(a, b, test=test, resamples=400, seed=r).significant)
        return float(np.mean(hits))

    assert rate("paired_permutation") > 0.25 > rate("hierarchical_bootstrap")


def test_a_null_effect_is_reported_as_such():
    result = run_experiment(SCRIPTED, ScriptedTrainer(effect=0.0, replicate=3), seeds=3)
    text = writeup.markdown(result)
    assert "No difference detected" in text and "Not reproduced at this budget" in text
    assert "| mean_reward | all | a − b |" in text


def test_the_writeup_page_has_its_figure(tmp_path):
    result = run_experiment(SCRIPTED, ScriptedTrainer(effect=0.3), seeds=2)
    page, text = writeup.write(result, tmp_path, "scripted")
    assert page.read_text() == text and (tmp_path / "scripted.png").stat().st_size > 1000
    assert "![learning curves](scripted.png)" in text


def _scores(rows):
    return HELDOUT_SCORE.frame([{"kind": "env", "source": "d", "clean_task_id": None, **row} for row in rows])


def test_the_robustness_gap_pairs_each_clean_task_with_its_own_twins():
    rows = ([{"task_id": "c1", "noise_level": 0, "sample": i, "reward": 1.0} for i in range(2)]
            + [{"task_id": "n1", "noise_level": 2, "clean_task_id": "c1", "sample": i, "reward": r}
               for i, r in enumerate((0.0, 1.0))]
            + [{"task_id": "c2", "noise_level": 0, "sample": i, "reward": 0.0} for i in range(2)]
            + [{"task_id": "c3", "noise_level": 0, "sample": 0, "reward": 1.0}])  # c3 has no twin: no gap unit
    scores = _scores(rows)
    assert unit_values(scores, "robustness_gap") == {"c1": 0.5}
    assert unit_values(scores, "noisy_score") == {"n1": 0.5}
    assert unit_values(scores, "clean_score") == {"c1": 1.0, "c2": 0.0, "c3": 1.0}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.integers(1, 8))
def test_pass_at_k_is_the_unbiased_estimate(attempts, k):
    """Pass@k of one task equals the share of k-subsets of its attempts holding a correct one."""
    from itertools import combinations

    k = min(k, len(attempts))
    scores = _scores([{"task_id": "t", "noise_level": 0, "sample": i, "reward": float(a)}
                      for i, a in enumerate(attempts)])
    subsets = list(combinations(attempts, k))
    assert unit_values(scores, "pass_at_k", k)["t"] == pytest.approx(sum(map(any, subsets)) / len(subsets))


def test_compare_refuses_arms_scored_on_different_units():
    with pytest.raises(ValueError, match="different units"):
        compare(np.zeros((3, 4)), np.zeros((3, 5)))


def test_every_declared_experiment_names_its_arms_and_a_known_primary_metric():
    assert set(EXPERIMENTS) == {"keychain_vs_qa", "noise_curriculum", "midtrain_augmentation", "kcg_selection",
                                "async_vs_sync"}
    for experiment in EXPERIMENTS.values():
        assert experiment.comparisons and all(a in experiment.arms and b in experiment.arms
                                              for a, b in experiment.comparisons)


def test_a_budget_sets_every_arms_trainer_overrides_and_a_base_replaces_the_cold_start(tmp_path):
    from flows.experiments.executor import PipelineExecutor

    experiment = EXPERIMENTS["keychain_vs_qa"]
    assert experiment.trainer_budget["steps"] == 60 and experiment.with_budget("smoke").trainer_budget["steps"] == 12
    assert experiment.with_budget("profile").trainer_budget == {}  # the profile's own trainer config
    real = experiment.with_base(str(tmp_path))
    assert real.base.model == str(tmp_path) and not real.base.cold_start
    PipelineExecutor(tmp_path / "data").check(real, "tiny")
    with pytest.raises(StageError, match="base 'nowhere' is neither a local model directory nor a stage"):
        PipelineExecutor(tmp_path / "data").check(experiment.with_base("nowhere"), "tiny")


def test_the_cold_start_phases_run_in_order_each_from_the_model_before_on_data_built_with_its_own_overrides(
        tmp_path, monkeypatch):
    from types import SimpleNamespace

    from flows.experiments import executor as executor_module
    from flows.experiments.executor import PipelineExecutor

    built, planned = [], []

    def build(self, stages, profile, overrides):  # a data artifact's key names its stage and its overrides
        built.append((list(stages), overrides))
        return {s: f"{s}@{overrides.get(s, {}).get('target_tokens', '-')}" for s in stages}

    def plan(data, base, **kwargs):
        planned.append((data, base, kwargs["overrides"]))
        return SimpleNamespace(stage="sft", key=f"sft{len(planned)}")

    monkeypatch.setattr(PipelineExecutor, "_build", build)
    monkeypatch.setattr(PipelineExecutor, "_execute", lambda self, plan: plan.key)
    monkeypatch.setattr(executor_module, "plan_sft", plan)
    declared = EXPERIMENTS["keychain_vs_qa"]
    experiment = type(declared).model_validate({**declared.model_dump(), "base": {
        "model": "tiny_policy", "cold_start": [
            {"sft_on": ["reading_curriculum"], "data": {"reading_curriculum": {"target_tokens": 256}},
             "sft": {"max_steps": 5}},
            {"sft_on": ["reading_curriculum", "midtrain_longctx"], "sft": {"max_steps": 7}}]}})

    assert PipelineExecutor(tmp_path / "data").base(experiment, "tiny") == ("sft", "sft2")
    assert planned == [(["reading_curriculum@256"], "tiny_policy@-", {"max_steps": 5}),
                       (["reading_curriculum@-", "midtrain_longctx@-"], "sft1", {"max_steps": 7})]
    assert built[0][0] == ["tiny_policy"] and built[1][1]["world"] == experiment.data["world"]


def test_a_comparison_of_an_undeclared_arm_is_refused():
    with pytest.raises(ValueError, match="names an arm not declared"):
        SCRIPTED.model_validate({**SCRIPTED.model_dump(), "statistics": {"metrics": ["mean_reward"],
                                                                         "comparisons": [("a", "c")]}})


def test_every_whole_seed_but_the_last_is_analysed_on_its_own():
    partials = []
    result = run_experiment(SCRIPTED, ScriptedTrainer(effect=0.3), seeds=3, on_seed=partials.append)
    assert [p.seeds for p in partials] == [1, 2] and [len(p.runs) for p in partials] == [2, 4]
    assert result.seeds == 3 and len(result.runs) == 6


def test_an_arm_interval_stays_within_the_range_of_its_scores():
    a = np.array([[0.0, 0.0, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]])
    c = compare(a, np.zeros((3, 4)))
    assert 0.0 <= c.a_score.lo <= c.a_score.value <= c.a_score.hi <= 0.5
    assert c.b_score.lo == c.b_score.hi == 0.0


def test_an_equivalence_claim_reads_a_null_as_consistent_and_a_difference_as_contradicting():
    equal = SCRIPTED.model_copy(update={"equivalence": True, "expected": "a = b"})
    assert "Consistent" in writeup.conclusion(run_experiment(equal, ScriptedTrainer(0.0, replicate=3), seeds=3))
    assert "Contradicted" in writeup.conclusion(run_experiment(equal, ScriptedTrainer(0.3), seeds=3))

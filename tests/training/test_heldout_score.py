"""The heldout_score stage: k attempts per held-out task by the task's own reward, a stable subset under
max_tasks, and exactly one model."""

from __future__ import annotations

import pytest
from inference_support import tiny_checkpoint
from rl_fixtures import double_prompts

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from training.heldout_score import heldout_score


def _score(data, prompts_key, params):
    stage = heldout_score.with_inputs(["test_double_prompts"])
    run = execute_stage(open_store(data), Catalog(data), stage, params, {"test_double_prompts": prompts_key}, "p0")
    return open_store(data).get("heldout_score", run.key).read("scores")


def test_k_attempts_per_task_and_a_stable_subset(tmp_path):
    data = tmp_path / "data"
    prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
    params = {"model_name_or_path": str(tiny_checkpoint()), "k": 3, "max_tasks": 5, "max_tokens": 4}
    scores = _score(data, prompts, params)
    assert scores.height == 15 and scores["task_id"].n_unique() == 5
    assert scores.group_by("task_id").len()["len"].to_list() == [3] * 5
    assert scores["reward"].is_between(0, 1).all() and set(scores["kind"]) == {"prompt"}
    again = _score(data, prompts, {**params, "k": 2})  # another artifact: the same five tasks
    assert set(again["task_id"]) == set(scores["task_id"])


def test_exactly_one_model_is_scored(tmp_path):
    data = tmp_path / "data"
    prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
    with pytest.raises(StageError, match="exactly one model"):
        _score(data, prompts, {"k": 1})


def test_environment_tasks_are_read_in_the_small_view_asked_for(tmp_path, monkeypatch):
    from training.async_rl import sources

    seen = []
    real = sources.load_tasks
    monkeypatch.setattr(sources, "load_tasks", lambda inputs, small_tools=None: seen.append(small_tools) or real(
        inputs, small_tools))
    data = tmp_path / "data"
    prompts = execute_stage(open_store(data), Catalog(data), double_prompts, {}, {}, "p0").key
    _score(data, prompts, {"model_name_or_path": str(tiny_checkpoint()), "k": 1, "max_tasks": 1, "max_tokens": 2,
                           "small_tools": 3})
    assert seen == [3]

"""RL tasks are read by what an artifact's outputs hold: prompt rows and QA seeds asked as their filter asked them,
not the items the filter set aside; an artifact offering none is refused by name."""

from __future__ import annotations

import re

import pytest
from rl_fixtures import double_prompts, qa_seed_rows
from sft_fixtures import double_trajectories

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from envgen.rewards import REWARDS
from training.async_rl.sources import load_tasks


@pytest.fixture()
def published(tmp_path):
    store, catalog = open_store(tmp_path), Catalog(tmp_path)

    def publish(stage, params=None):
        return store.get(stage.name, execute_stage(store, catalog, stage, params or {}, {}, "p0").key)

    return publish


def test_prompt_rows_become_tasks_with_their_reward(published):
    tasks = load_tasks({"mix": published(double_prompts)})
    assert [t.task_id for t in tasks] == [f"qa:p{i}" for i in range(12)]
    assert {t.kind for t in tasks} == {"prompt"} and {t.payload["reward_fn"] for t in tasks} <= set(REWARDS)
    assert tasks[3].payload["answer"] == "3"


@pytest.mark.parametrize("budget", [8, 64])
def test_qa_seeds_are_asked_within_their_filters_prompt_budget(published, budget):
    tasks = load_tasks({"seeds": published(qa_seed_rows, {"max_prompt_tokens": budget})})
    assert [t.task_id for t in tasks] == ["qa:q0", "qa:q1", "qa:q2"]
    [message] = tasks[1].payload["prompt"]
    assert "Who founded firm 1?" in message["content"] and tasks[1].payload["answer"] == "Founder 1"
    document = max(re.findall("x+", message["content"]), key=len)
    assert budget * 4 - 20 <= len(document) <= budget * 4  # documents cut to ~4 characters a token
    assert tasks[1].source == "qa" and tasks[1].prior_pass_rate == 0.25  # the filter's pass count, 1 of 4


def test_an_artifact_without_tasks_is_refused_by_name(published):
    artifact = published(double_trajectories)
    with pytest.raises(StageError, match=f"{artifact.key} offers no RL tasks"):
        load_tasks({"trajectories": artifact})


def test_small_tools_offers_each_task_its_own_tools_plus_distractors_and_twins_their_clean_tasks():
    import json

    import polars as pl
    from agent_fixtures import airline_env_and_task

    from data_contracts.stage import FrameArtifact
    from tasks.environments.records import ENVIRONMENT
    from tasks.noise.records import NOISY_TASK
    from tasks.records import TASK

    env, task = airline_env_and_task()
    twin = {**task, "task_id": f"{task['task_id']}~n1", "noise_level": 1, "clean_task_id": task["task_id"]}
    inputs = {"environments": FrameArtifact({"environments": ENVIRONMENT.frame([env]), "tasks": TASK.frame([task])}),
              "noisy_tasks": FrameArtifact({"tasks": NOISY_TASK.frame([twin])})}
    golden = {a["name"] for a in json.loads(task["golden_actions"])}
    assert len(env["tool_names"]) > len(golden) + 1  # the view is smaller than the environment
    as_built, small = load_tasks(inputs), load_tasks(inputs, small_tools=1)
    assert [t.payload["env"]["tool_names"] for t in as_built] == [list(env["tool_names"])] * 2
    clean, noisy = (t.payload["env"] for t in small)
    assert golden < set(clean["tool_names"]) and len(clean["tool_names"]) == len(golden) + 1
    assert noisy["tool_names"] == clean["tool_names"]  # a twin is offered its clean task's tools
    assert all("description" not in json.dumps(s["function"].get("parameters", {})) for s in json.loads(clean["tools"]))
    assert pl.Series(clean["tool_names"]).is_sorted()

"""RL tasks are read by what an artifact's outputs hold: prompt rows and QA seeds asked as their filter asked them,
not the items the filter set aside; an artifact offering none is refused by name."""

from __future__ import annotations

import re

import pytest
from rl_fixtures import double_prompts, qa_seed_rows
from sft_fixtures import double_trajectories

from data_contracts.catalog import Catalog
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from data_contracts.store import ArtifactStore
from envgen.rewards import REWARDS
from training.rl.sources import load_tasks


@pytest.fixture()
def published(tmp_path):
    store, catalog = ArtifactStore(tmp_path), Catalog(tmp_path)

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

"""Which task a reset gets: by id, by id at a noise level (its twin), or drawn by seed; and what is not served."""

from __future__ import annotations

import pytest
from env_server_fixtures import env_and_task
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.environments.tasks import ServedTasks, TaskNotServed


def served_with_twins() -> ServedTasks:
    env, task = env_and_task("airline")
    twins = [{**task, "task_id": f"{task['task_id']}~noise{k}", "clean_task_id": task["task_id"], "noise_level": k}
             for k in (1, 3)]
    return ServedTasks.from_rows([env], [task, *twins], "fixture/twins")


def test_a_task_id_at_a_noise_level_is_its_twin() -> None:
    served = served_with_twins()
    clean = next(t for t in served.tasks if "~" not in t)
    assert served.choose(clean)["task_id"] == clean
    assert served.choose(clean, noise_level=3)["task_id"] == f"{clean}~noise3"
    assert served.choose(f"{clean}~noise1", noise_level=0)["task_id"] == clean
    with pytest.raises(TaskNotServed, match=r"no twin at noise_level 2; its levels are \[0, 1, 3\]"):
        served.choose(clean, noise_level=2)
    with pytest.raises(TaskNotServed, match="unknown task_id 'nope'"):
        served.choose("nope")
    with pytest.raises(TaskNotServed, match=r"serves levels \[0, 1, 3\]"):
        served.choose(seed=0, noise_level=4)
    assert served.describe()["noise_levels"] == {"0": 1, "1": 1, "3": 1}


@settings(deadline=None)  # the first example builds the fixture environment (about a second under load)
@given(st.integers(min_value=0, max_value=2**31), st.sampled_from([None, 0, 1, 3]))
def test_a_seed_draws_the_same_task_at_the_asked_level(seed: int, level: int | None) -> None:
    served = served_with_twins()
    drawn = served.choose(seed=seed, noise_level=level)
    assert drawn == served.choose(seed=seed, noise_level=level)
    assert level is None or drawn["task_id"].endswith(f"~noise{level}") == (level > 0)


def test_tasks_must_name_served_environments() -> None:
    env, task = env_and_task("airline")
    with pytest.raises(ValueError, match="no tasks"):
        ServedTasks.from_rows([env], [])
    with pytest.raises(ValueError, match="tasks name environments it does not hold"):
        ServedTasks.from_rows([], [task])

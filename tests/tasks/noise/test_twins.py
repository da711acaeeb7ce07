"""Noisy twins say only what people know: a twin whose request or profile states an internal key is rejected when
it is built, and its contract fails a frame that holds one (224 of 357 twin facts were keys before)."""

from __future__ import annotations

import json

import polars as pl

from data_contracts.gate import validate
from envgen.checks import database_keys, keys_said, user_texts
from envgen.compiler import compiled
from envgen.taskgen import build_verified
from tasks.noise.records import NOISY_TASK
from tasks.noise.twins import NoiseParams, build_twins, twins_contract


def _clean() -> tuple[dict, dict]:
    env, task, reason = build_verified(compiled("hotel"), "hotel-0", 0)
    assert env is not None, reason
    return env, task


def test_twins_of_a_clean_task_state_no_key() -> None:
    env, task = _clean()
    kept, _ = build_twins(pl.DataFrame([env]), pl.DataFrame([task]), NoiseParams(levels=(1, 4)), "noisy_tasks", "p0",
                          NOISY_TASK)
    assert kept.height == 2
    keys = database_keys(compiled("hotel"), env["db"])
    assert not any(keys_said(user_texts(row), keys) for row in kept.iter_rows(named=True))
    report = validate("noisy_tasks", "tasks", kept, twins_contract(NOISY_TASK), "p0")
    assert report.passed, report.summary()


def test_a_twin_stating_an_internal_key_is_rejected_and_fails_the_contract() -> None:
    env, task = _clean()
    key = next(str(v) for a in json.loads(task["golden_actions"]) for k, v in a["arguments"].items()
               if k.endswith("_id"))
    told = {**task, "description": f"{task['description']} My booking id is {key}."}
    kept, rejected = build_twins(pl.DataFrame([env]), pl.DataFrame([told]), NoiseParams(levels=(1,)), "noisy_tasks",
                                 "p0", NOISY_TASK)
    assert kept.height == 0 and "internal key" in rejected["reason"][0]
    frame = NOISY_TASK.frame([{**{k: None for k in NOISY_TASK.columns}, **told, "task_id": f"{task['task_id']}~noise1",
                               "clean_task_id": task["task_id"], "noise_level": 1, "robust_success": True,
                               "transforms": [], "noise": json.dumps({"level": 1, "transforms": [],
                                                                      "clean_task_id": task["task_id"]})}])
    report = validate("noisy_tasks", "tasks", frame, twins_contract(NOISY_TASK), "p0")
    assert "users_state_what_people_know" in " ".join(report.summary()["failed"])

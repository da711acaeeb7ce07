"""Small environments: the task's tools plus distractors, compact schemas, and a runtime that offers them."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envgen.compiler import compiled
from envgen.construct import ConstructionSettings, build_environment
from envgen.environment import Environment, replay
from envgen.small import compact_schema, offered_tools, small_environment, task_tools
from envgen.taskgen import TaskSettings, environment_record, make_task, mutate


@pytest.fixture(scope="module")
def airline() -> tuple[dict, dict]:
    domain = compiled("airline")
    built = build_environment(domain, 3, ConstructionSettings())
    env = environment_record(domain, built, "airline-3", 3)
    task, reason = make_task(domain, env, built, random.Random(3), TaskSettings())
    assert task is not None, reason
    return env, task


def golden_names(task: dict) -> set[str]:
    return {a["name"] for a in json.loads(task["golden_actions"])}


names = st.lists(st.from_regex(r"[a-z]{1,6}", fullmatch=True), min_size=1, max_size=12, unique=True)


@given(names, st.data(), st.integers(0, 15), st.integers(0, 1000))
def test_offered_tools_keep_the_used_ones_and_add_distractors_near_first(tools, data, distractors, seed):
    used = data.draw(st.lists(st.sampled_from(tools), min_size=1, unique=True))
    edges = data.draw(st.lists(st.tuples(st.sampled_from(tools), st.sampled_from(tools)), max_size=20))
    offered = offered_tools(tools, edges, used, distractors, random.Random(seed))
    assert offered == sorted(offered) and set(used) <= set(offered) <= set(tools)
    extra = set(offered) - set(used)
    assert len(extra) == min(distractors, len(tools) - len(used))
    near = ({v for u, v in edges if u in used} | {u for u, v in edges if v in used}) - set(used)
    if len(near) >= distractors:  # neighbours first: only neighbours when there are enough
        assert extra <= near
    else:
        assert near <= extra
    assert offered == offered_tools(tools, edges, used, distractors, random.Random(seed))  # deterministic


def test_offered_tools_refuse_a_task_calling_a_missing_tool():
    with pytest.raises(ValueError, match=r"does not have: \['ghost'\]"):
        offered_tools(["a", "b"], [], ["ghost"], 1, random.Random(0))


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
                       st.one_of(st.just({"type": "integer", "description": "x"}),
                                 st.lists(st.text(max_size=4), min_size=1, max_size=3).map(
                                     lambda v: {"type": "string", "enum": v, "description": "y"})),
                       max_size=6), st.data())
def test_compact_schema_keeps_names_types_enums_and_required(properties, data):
    required = data.draw(st.lists(st.sampled_from(sorted(properties)), unique=True)) if properties else []
    full = {"type": "function", "function": {"name": "f", "description": "A tool.", "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}
    compact = compact_schema(full)
    assert compact["function"]["name"] == "f" and "description" not in compact["function"]
    assert compact["function"]["parameters"]["required"] == required
    for name, spec in properties.items():
        kept = compact["function"]["parameters"]["properties"][name]
        assert kept == ({"enum": spec["enum"]} if "enum" in spec else {"type": spec["type"]})
    assert "description" not in json.dumps(compact)


def test_a_small_environment_replays_its_golden_trajectory_and_offers_compact_schemas(airline):
    env, task = airline
    small = small_environment(env, task, 2, random.Random(0))
    assert set(small["tool_names"]) >= golden_names(task)
    assert small["n_tools"] == len(golden_names(task)) + 2 < env["n_tools"]
    assert all(u in small["tool_names"] and v in small["tool_names"] for u, v in json.loads(small["edges"]))
    runtime = Environment(small)
    assert runtime.schemas == json.loads(small["tools"])
    assert all("description" not in json.dumps(s) for s in runtime.schemas)
    assert replay(runtime, task).reward == 1.0
    assert runtime.reset(task).tools == runtime.schemas
    runtime.close()


def test_a_small_environment_still_refuses_a_mutated_trajectory(airline):
    env, task = airline
    small = small_environment(env, task, 2, random.Random(0))
    wrong = mutate(compiled("airline"), small, task, "wrong-row", random.Random(0))
    assert wrong is not None and replay(Environment(small), task, wrong).reward == 0.0


def test_a_tool_outside_the_small_environment_is_unknown(airline):
    env, task = airline
    small = small_environment(env, task, 0, random.Random(0))
    outside = min(set(env["tool_names"]) - set(small["tool_names"]))
    runtime = Environment(small)
    runtime.reset(task)
    assert "unknown tool" in json.dumps(runtime.call_tool(outside, {}).content)


def test_full_records_keep_the_domain_schemas(airline):
    env, _ = airline
    assert Environment(env).schemas == compiled("airline").schemas(list(env["tool_names"]))
    stale = {**env, "tool_names": list(env["tool_names"])[:3]}  # tools naming other tools than tool_names
    assert [s["function"]["name"] for s in Environment(stale).schemas] == stale["tool_names"]


@given(distractors=st.integers(-1, 6), seed=st.integers(0, 50))
def test_task_tools_offer_the_called_tools_and_the_same_view_as_a_small_environment(airline, distractors, seed):
    """One rendering for every reader: the task's tools plus distractors in compact schemas, the same set and
    schemas a small environment offers with the same draw; -1 offers every tool."""
    env, task = airline
    offered = task_tools(env, sorted(golden_names(task)), distractors, seed)
    names = [t["function"]["name"] for t in offered]
    assert names == sorted(names) and set(names) >= golden_names(task)
    assert all("description" not in json.dumps(t) for t in offered)
    if distractors < 0:
        assert names == sorted(env["tool_names"])
    else:
        assert len(names) == min(len(golden_names(task)) + distractors, env["n_tools"])
        assert offered == json.loads(small_environment(env, task, distractors, random.Random(seed))["tools"])
    assert offered == task_tools(env, sorted(golden_names(task)), distractors, random.Random(seed))

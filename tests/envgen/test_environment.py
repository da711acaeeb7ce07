"""The runtime API: reset/step with OpenAI tool-call messages, the profile-grounded user, reward components and
failure labels, async variants."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envgen.compiler import compiled
from envgen.construct import ConstructionSettings, build_environment
from envgen.environment import Environment, ProfileUserSimulator, replay, required_outputs_met
from envgen.seeding import engine_from_bytes, sqlite_bytes
from envgen.taskgen import TaskSettings, environment_record, make_task


@pytest.fixture(scope="module")
def airline() -> tuple[dict, dict]:
    d = compiled("airline")
    built = build_environment(d, 3, ConstructionSettings())
    env = environment_record(d, built, "airline-3", 3)
    task, reason = make_task(d, env, built, random.Random(3), TaskSettings(inline_fact_prob=0.0))
    assert task is not None, reason
    return env, task


def call(name: str, args: dict, i: int = 0) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


class ScriptedAgent:
    """Test double: asks for every profile fact, then plays the golden actions, then reports the outputs."""

    def __init__(self, task: dict) -> None:
        self.task = task

    def run(self, env: Environment) -> tuple[float, dict]:
        env.reset(self.task)
        facts = json.loads(self.task["user_profile"])["facts"]
        for f in facts:
            obs, reward, done, info = env.step({"role": "assistant", "content": f"What is your {f['label']}?"})
            assert not done and str(f["value"]) in obs.messages[0]["content"]
        for i, a in enumerate(json.loads(self.task["golden_actions"])):
            obs, reward, done, info = env.step(call(a["name"], a["arguments"], i))
            assert obs.messages[0]["tool_call_id"] == f"c{i}" and not done
        outputs = json.loads(self.task["rubric"])["required_outputs"]
        obs, reward, done, info = env.step({"role": "assistant", "content": f"All done: {', '.join(outputs)}."})
        assert done
        return reward, info


def test_reset_gives_system_user_and_the_environment_tools(airline: tuple) -> None:
    env_rec, task = airline
    env = Environment(env_rec)
    obs = env.reset(task)
    assert [m["role"] for m in obs.messages] == ["system", "user"]
    assert obs.messages[1]["content"] == task["description"]
    assert sorted(t["function"]["name"] for t in obs.tools) == sorted(env_rec["tool_names"])


def test_scripted_agent_solves_the_task_through_step(airline: tuple) -> None:
    env_rec, task = airline
    reward, info = ScriptedAgent(task).run(Environment(env_rec))
    assert reward == 1.0 and info["failure"] is None
    assert info["reward_components"] == {"db_state": 1.0, "required_outputs": 1.0, "policy": 1.0}


def test_user_never_ends_before_the_final_write(airline: tuple) -> None:
    env_rec, task = airline
    env = Environment(env_rec)
    env.reset(task)
    for text in ("Goodbye!", "Is there anything else?", "Done."):
        obs, reward, done, _ = env.step({"role": "assistant", "content": text})
        assert not done and reward == 0.0 and obs.messages[0]["role"] == "user"


def test_unknown_tool_and_bad_arguments_are_tool_messages(airline: tuple) -> None:
    env_rec, task = airline
    env = Environment(env_rec)
    env.reset(task)
    obs, *_ = env.step(call("drop_database", {}))
    assert "unknown tool" in json.loads(obs.messages[0]["content"])["error"]
    name = env_rec["tool_names"][0]
    bad = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": name, "arguments": "{not json"}}]}
    obs, *_ = env.step(bad)
    assert "not valid JSON" in json.loads(obs.messages[0]["content"])["error"]


def test_internal_tool_errors_are_labelled_tool(airline: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    env_rec, task = airline

    def broken(*_a, **_k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("envgen.tools.Executor.act", broken)
    episode = replay(Environment(env_rec), task)
    assert episode.reward == 0.0 and episode.failure == "tool"


def test_a_failing_user_simulator_is_labelled_user(airline: tuple) -> None:
    env_rec, task = airline

    class BrokenUser(ProfileUserSimulator):
        def reply(self, assistant_text: str, final_write_done: bool) -> tuple[str, bool]:
            raise TimeoutError("simulator endpoint down")

    env = Environment(env_rec)
    env.reset(task, user=BrokenUser(task))
    _, reward, done, info = env.step({"role": "assistant", "content": "How can I help?"})
    assert done and reward == 0.0 and info["failure"] == "user"


def test_policy_violations_zero_the_policy_component() -> None:
    """Cancelling a basic-economy reservation goes through (the policy is not enforced by the tool) but scores 0."""
    d = compiled("airline")
    for seed in range(40):
        built = build_environment(d, seed, ConstructionSettings())
        if "cancel_reservation" in built.tools:
            break
    env = environment_record(d, built, "airline-policy", seed)
    task, reason = make_task(d, env, built, random.Random(seed), TaskSettings())
    assert task is not None, reason
    golden_ids = {v for a in json.loads(task["golden_actions"]) for v in a["arguments"].values()}
    engine = engine_from_bytes(env["db"])
    with engine.begin() as conn:
        r, f = d.tables["reservation"], d.tables["flight"]
        victim = next(row for row in conn.execute(r.select()) if row.reservation_id not in golden_ids
                      and row.flight_id not in golden_ids)
        conn.execute(r.update().where(r.c.reservation_id == victim.reservation_id)
                     .values(cabin="basic_economy", status="confirmed", total_price=200.0))
        conn.execute(f.update().where(f.c.flight_id == victim.flight_id).values(departure="2026-07-01T08:00:00"))
    env = {**env, "db": sqlite_bytes(engine)}
    actions = json.loads(task["golden_actions"]) + [
        {"name": "cancel_reservation", "arguments": {"reservation_id": victim.reservation_id}}]
    episode = replay(Environment(env), task, actions)
    assert episode.components["policy"] == 0.0 and episode.reward == 0.0
    assert episode.info["violations"] == ["no_basic_economy_cancellation"]


def test_async_variants(airline: tuple) -> None:
    env_rec, task = airline

    async def go() -> float:
        env = Environment(env_rec)
        await env.areset(task)
        reward = 0.0
        for i, a in enumerate(json.loads(task["golden_actions"])):
            _, reward, _, _ = await env.astep(call(a["name"], a["arguments"], i))
        outputs = json.loads(task["rubric"])["required_outputs"]
        _, reward, done, _ = await env.astep({"role": "assistant", "content": " ".join(outputs)})
        return reward if done else -1.0

    assert asyncio.run(go()) == 1.0


def test_each_episode_starts_from_the_seeded_database(airline: tuple) -> None:
    env_rec, task = airline
    env = Environment(env_rec)
    assert replay(env, task).reward == 1.0
    assert replay(env, task).reward == 1.0  # the second episode does not see the first one's writes


@given(st.floats(0.01, 1e6).map(lambda x: round(x, 2)))
def test_required_amounts_match_with_formatting(amount: float) -> None:
    text = f"{amount:.2f}"
    pretty = f"${amount:,.2f}"
    assert required_outputs_met([text], [f"You were refunded {pretty}."])
    assert not required_outputs_met([text], [f"You were refunded {amount + 1:.2f}."])


@pytest.mark.parametrize(("required", "said", "ok"), [
    (["19"], ["in 1984"], False), (["19"], ["19 dollars"], True), (["12.50"], ["12.5"], True),
    (["12.50"], ["112.50"], False), (["12.50"], ["12.505"], False), ([], [""], True),
])
def test_required_outputs_on_token_boundaries(required: list, said: list, ok: bool) -> None:
    assert required_outputs_met(required, said) is ok


def test_callable_user_simulator_seam_keeps_the_grounding_rule(airline: tuple) -> None:
    """A test-double 'LLM' that always wants to stop: the episode still runs until the final write."""
    from envgen.environment import CallableUserSimulator

    env_rec, task = airline
    seen: list[list[dict]] = []

    def always_stop(messages: list[dict]) -> str:
        seen.append(messages)
        return "Great, bye! ###STOP###"

    env = Environment(env_rec)
    env.reset(task, user=CallableUserSimulator(task, always_stop))
    _, _, done, _ = env.step({"role": "assistant", "content": "Anything else?"})
    assert not done
    assert "Facts you know" in seen[0][0]["content"] and seen[0][-1] == {"role": "user", "content": "Anything else?"}
    for i, a in enumerate(json.loads(task["golden_actions"])):
        env.step(call(a["name"], a["arguments"], i))
    outputs = json.loads(task["rubric"])["required_outputs"]
    _, reward, done, _ = env.step({"role": "assistant", "content": f"Done: {', '.join(outputs)}"})
    assert done and reward == 1.0

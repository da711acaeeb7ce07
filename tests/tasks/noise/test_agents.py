"""What each scripted reference agent (a test double) can read off its observations."""

from __future__ import annotations

import pytest

from envgen.noise.tools import alias, drift
from tasks.noise.agents import NaiveReferenceAgent, Observations, RobustReferenceAgent


@pytest.mark.parametrize(
    ("seen", "value", "naive", "robust"),
    [
        (Observations(outputs=[{"user_id": "U1"}]), "U1", True, True),
        (Observations(outputs=[{alias("user_id", "camel"): "U1"}]), "U1", False, True),
        (Observations(outputs=[{"results": [{"departure": drift("2026-05-20", "us")}]}]), "2026-05-20", False, True),
        (Observations(outputs=[{"amount": drift(120.5, "currency")}]), "120.50", False, True),
        (Observations(outputs=[{"amount": 120.5}]), "120.50", True, True),
        (Observations(outputs=[{"status": drift("checked_in", "upper")}]), "checked_in", False, True),
        (Observations(user_text=["Please book a coach seat."]), "economy", False, True),
        (Observations(user_text=["My reservation is RES19."]), "RES19", True, True),
        (Observations(user_text=["Born in 1984."]), "19", False, False),
        (Observations(user_text=["nothing here"]), "U1", False, False),
    ],
)
def test_what_each_agent_can_see(seen: Observations, value, naive: bool, robust: bool) -> None:
    assert seen.find(value, robust=False) is naive
    assert seen.find(value, robust=True) is robust


GOLDEN = [{"name": "get_user", "arguments": {"user_id": "U1"}},
          {"name": "cancel", "arguments": {"user_id": "U1", "reason": "late"}}]


def _call(message: dict) -> tuple[str, dict]:
    import json

    fn = message["tool_calls"][0]["function"]
    return fn["name"], json.loads(fn["arguments"])


def test_robust_agent_retries_follows_continuations_and_asks() -> None:
    agent = RobustReferenceAgent(GOLDEN, observable={"0.user_id", "1.user_id", "1.reason"})
    agent.observe([{"role": "user", "content": "Cancel for user U1."}])
    assert _call(agent.act()) == ("get_user", {"user_id": "U1"})
    agent.observe([{"role": "tool", "content": '{"error": {"type": "timeout", "retryable": true}}'}])
    assert _call(agent.act()) == ("get_user", {"user_id": "U1"})  # retried
    agent.observe([{"role": "tool", "content": '{"data": {"user_id": "U1"}, "continuation_token": "t1"}'}])
    assert _call(agent.act()) == ("get_user", {"user_id": "U1", "continuation_token": "t1"})
    agent.observe([{"role": "tool", "content": '{"data": {"name": "Ann"}}'}])
    assert agent.seen.outputs[-1] == {"user_id": "U1", "name": "Ann"}
    question = agent.act()  # "reason" is nowhere to be seen: re-query the read, then ask
    assert _call(question)[0] == "get_user"
    agent.observe([{"role": "tool", "content": '{"user_id": "U1"}'}])
    question = agent.act()
    assert "reason" in question["content"] and not question.get("tool_calls")
    agent.observe([{"role": "user", "content": "My reason is late."}])
    assert _call(agent.act()) == ("cancel", {"user_id": "U1", "reason": "late"})


def test_naive_agent_neither_retries_nor_asks() -> None:
    agent = NaiveReferenceAgent(GOLDEN, observable={"0.user_id", "1.user_id", "1.reason"})
    agent.observe([{"role": "user", "content": "Cancel for user U1."}])
    agent.act()
    agent.observe([{"role": "tool", "content": '{"error": {"type": "timeout", "retryable": true}}'}])
    final = agent.act()
    assert agent.gave_up and "could not" in final["content"] and not final.get("tool_calls")

"""Shared fixtures of the agent-loop tests: one small airline environment with a verified task, and scripted
test-double policies that act in it."""

from __future__ import annotations

import json
import random
from functools import lru_cache
from typing import Any

from inference.engine import Request
from inference.testing import ScriptedReply


@lru_cache(maxsize=1)
def airline_env_and_task() -> tuple[dict[str, Any], dict[str, Any]]:
    from envgen.compiler import compile_domain
    from envgen.construct import ConstructionSettings, build_environment
    from envgen.domain_spec import load_domain
    from envgen.taskgen import TaskSettings, environment_record, make_task

    domain = compile_domain(load_domain("airline"))
    # A small environment (7 tools, one chain) keeps prompts about 1K tokens for the tiny model.
    built = build_environment(domain, 0, ConstructionSettings(min_tools=4, max_chains=1))
    env = environment_record(domain, built, "airline-0", 0)
    task, reason = make_task(domain, env, built, random.Random(0), TaskSettings())
    if task is None:
        raise RuntimeError(f"fixture task was rejected: {reason}")
    return env, task


def make_env():
    from envgen.environment import Environment

    return Environment(airline_env_and_task()[0])


def n_calls_made(request: Request) -> int:
    return sum(bool(m.get("tool_calls")) for m in request.messages if m["role"] == "assistant")


def golden_policy(request: Request, index: int) -> ScriptedReply:
    """Replays the task's golden actions one per turn, then tells the user the required outputs."""
    _, task = airline_env_and_task()
    actions = json.loads(task["golden_actions"])
    done = n_calls_made(request)
    if done < len(actions):
        return ScriptedReply(tool_calls=(actions[done],))
    outputs = ", ".join(str(v) for v in json.loads(task["rubric"])["required_outputs"])
    return ScriptedReply(text=f"Your request is complete. Details: {outputs or 'none'}.")


def first_action_forever(request: Request, index: int) -> ScriptedReply:
    """Repeats the first golden action (a read or a write): the episode never ends on its own."""
    _, task = airline_env_and_task()
    return ScriptedReply(text="Checking.", tool_calls=(json.loads(task["golden_actions"])[0],))


def stall_policy(request: Request, index: int) -> str:
    """Talks without acting: the user simulator keeps asking, the task is never done."""
    return "Let me think about that."

"""Stage `small_envs`: each verified environment as a small environment (its task's tools plus a few distractors,
compact schemas; ``envgen/small.py``) whose whole golden trajectory fits a short context, measured with the tokenizer.

The tiny model has 4,096 positions and a full environment prompt is about 13K tokens, so the tiny profile's agent
loops (SFT data, RL, evaluation) use these rows. Each kept task's golden trajectory, replayed in the small
environment (reward 1 by execution), is published as a ``trajectory`` with its token count: the measurement that
decides the fit, and conversations a cold-start SFT can train on. Tasks whose trajectory does not fit go to
``rejected`` with their length.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import polars as pl
from pydantic import Field

from data_contracts.schemas import ENVIRONMENT, ENVIRONMENT_REJECTED, TASK, TRAJECTORY
from data_contracts.stage import REJECTED, Artifact, Check, Params, rng_for, stage
from envgen.checks import WORLD_CHECKS, golden_fails
from envgen.runtime import Environment, replay
from envgen.small import small_environment

STAGE = "small_envs"
VERIFIER = "execution"  # the midtrain verifiers' name: the row replays through the runtime on env_db to reward 1


class SmallEnvsParams(Params):
    distractors: int = Field(3, ge=0, description="tools offered beside the task's own (graph neighbours first)")
    tool_schemas: Literal["compact", "full"] = Field(
        "compact", description="compact: names, parameter types or enums, required (no descriptions); full: as built")
    max_tokens: int = Field(
        3584, gt=0, description="the golden trajectory, chat-templated with its tools, must fit this many tokens "
        "(the tiny model has 4,096 positions; the rest is room for an agent's own turns)")
    seed: int = Field(0, description="distractor choice; environment i uses rng_for(seed, stage, partition, i)")


def golden_trajectory(env: dict[str, Any], task: dict[str, Any], tokenizer: Any, max_tokens: int) -> dict[str, Any]:
    """The task's golden trajectory in ``env`` as a ``trajectory`` row (assistant turns trained, ``verify_input``
    and ``env_db`` so it re-verifies on its own); raises ValueError when it does not replay to reward 1."""
    runtime = Environment(env)
    try:
        score = replay(runtime, task)
        tools = runtime.schemas
    finally:
        runtime.close()
    if score.reward != 1.0:
        raise ValueError(f"golden trajectory scored {score.reward} ({score.components})")
    messages = [dict(m) for m in score.messages]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    return {
        "id": f"{task['task_id']}#golden", "source": "golden_replay", "env_id": env["env_id"],
        "task_id": task["task_id"], "seed_id": None, "domain": env["domain"],
        "messages": json.dumps(messages), "tools": json.dumps(tools),
        "train": [m["role"] == "assistant" for m in messages], "verified": True, "verifier": VERIFIER,
        "parent_id": None, "transform": None, "transform_settings": None,
        "tokens": len(tokenizer.encode(text, add_special_tokens=False)),
        "verify_input": json.dumps({"env": {k: v for k, v in env.items() if k != "db"}, "task": task,
                                    "limits": {"max_tokens": max_tokens}}),
        "env_db": bytes(env["db"]),
    }


def _train_flags_off_assistant(frame: pl.DataFrame) -> list[bool]:
    """Rows whose train flags do not line up with their messages or mark a non-assistant message."""
    bad = []
    for messages, flags in zip(frame["messages"], frame["train"], strict=True):
        roles = [m["role"] for m in json.loads(messages)]
        bad.append(len(roles) != len(flags) or any(f and r != "assistant" for r, f in zip(roles, flags, strict=True)))
    return bad


TRAIN_FLAGS = Check("train_flags_on_assistant_turns", _train_flags_off_assistant,
                    description="one train flag per message, true only on assistant messages")


# 2: tool results are rendered compactly (envgen.runtime.render_result)
@stage(name=STAGE, version="2", inputs=("environments", "tokenizer"), params=SmallEnvsParams,
       outputs={
           "environments": ENVIRONMENT.contract(checks=(
               Check("golden_replays", golden_fails, description="the golden trajectory replays with reward 1"),
               *WORLD_CHECKS)),
           "tasks": TASK.contract(),
           "trajectories": TRAJECTORY.contract(checks=(TRAIN_FLAGS,)),
           REJECTED: ENVIRONMENT_REJECTED.contract(),
       })
def small_envs(inputs: Mapping[str, Artifact], params: SmallEnvsParams, partition: str) -> dict[str, pl.DataFrame]:
    """Small environments (task tools plus distractors, compact schemas) whose golden trajectory fits max_tokens."""
    from inference.tokenizer import tokenizer_from_row

    tokenizer = tokenizer_from_row(inputs["tokenizer"].read("tokenizer").row(0, named=True))
    tasks = {row["env_id"]: row for row in inputs["environments"].read("tasks").iter_rows(named=True)}
    envs, kept_tasks, trajectories, rejected = [], [], [], []
    environments = inputs["environments"].read("environments").sort("env_id")
    for i, env in enumerate(environments.iter_rows(named=True)):
        task = tasks[env["env_id"]]
        small = small_environment(env, task, params.distractors, rng_for(params.seed, STAGE, partition, i),
                                  compact=params.tool_schemas == "compact")
        trajectory = golden_trajectory(small, task, tokenizer, params.max_tokens)
        if trajectory["tokens"] > params.max_tokens:
            rejected.append({"env_id": env["env_id"], "domain": env["domain"], "stage_step": "fit",
                             "reason": f"golden trajectory of {trajectory['tokens']} tokens exceeds "
                                       f"max_tokens={params.max_tokens}"})
            continue
        envs.append(small)
        kept_tasks.append(task)
        trajectories.append(trajectory)
    return {"environments": ENVIRONMENT.frame(envs), "tasks": TASK.frame(kept_tasks),
            "trajectories": TRAJECTORY.frame(trajectories), REJECTED: ENVIRONMENT_REJECTED.frame(rejected)}

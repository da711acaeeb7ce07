"""Stage `small_envs`: a customer task on each verified environment, the environment cut to that task's tools
plus a few distractors with compact schemas (``envgen/small.py``), and the task's trajectory played by the reference
agent of the mid-training routes (``tasks.midtrain.synth``), kept when it fits a short context, measured with the
tokenizer.

The tiny model has 4,096 positions and a full environment prompt is about 13K tokens, so the tiny profile's agent
loops (SFT data, RL, evaluation) use these rows. Each environment gets a task for one acting customer (chains
sampled from its own tools, the four mutated trajectories checked to score 0, as an RL task needs), played as every
trajectory route plays: the customer identified first, each call explained, the outcome stated from what the writes
returned. The trajectory re-verifies by execution and holds to the trajectory standard
(``envgen.trajectory_standard``); conversations a cold-start SFT trains on. An environment without such a task, or
whose trajectory does not fit, goes to ``rejected`` with the reason (its length, for a misfit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, Check, Params, rng_for, stage
from envgen.checks import WORLD_CHECKS, golden_fails
from envgen.records import TRAJECTORY
from envgen.small import small_environment
from envgen.taskgen import TaskSettings
from envgen.trajectory_checks import EXECUTION, verify_execution
from envgen.trajectory_standard import VARIED_SENTENCES, habit_problem, standard_contract
from tasks.environments.records import ENVIRONMENT, ENVIRONMENT_REJECTED
from tasks.records import TASK

STAGE = "small_envs"


class SmallEnvsParams(Params):
    distractors: int = Field(3, ge=0, description="tools offered beside the task's own (graph neighbours first)")
    tool_schemas: Literal["compact", "full"] = Field(
        "compact", description="compact: names, parameter types or enums, required (no descriptions); full: as built")
    max_tokens: int = Field(
        3584, gt=0, description="the trajectory, chat-templated with its tools, must fit this many tokens "
        "(the tiny model has 4,096 positions; the rest is room for an agent's own turns)")
    max_chains: int = Field(1, ge=1, le=6, description="most chains (sub-goals) per task (one: the trajectory fits "
                            "the tiny model's window with room for the agent's own turns)")
    max_reads: int = Field(2, ge=1, le=8, description="most read tools before each chain's write")
    task_attempts: int = Field(4, ge=1, le=32, description="tasks sampled per environment before it is rejected")
    seed: int = Field(0, description="task and distractor choice; environment i uses rng_for(seed, stage, partition, i)")


def played_trajectory(env: dict[str, Any], params: SmallEnvsParams, rng: Any, tokenizer: Any
                      ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(small environment, its task, the played trajectory row) for a customer task on ``env`` whose trajectory
    verifies, keeps the standard's habits and fits ``max_tokens``; raises Unusable (from ``tasks.midtrain.synth``)
    when none of ``task_attempts`` samples does."""
    from tasks.midtrain.synth import ReferenceEpisode, Unusable, play, sample_task
    from tasks.midtrain.trajectory_stages import make_row

    reasons = []
    for attempt in range(params.task_attempts):
        try:
            episode = sample_task(env, rng, params.max_chains, params.max_reads, TaskSettings(), f"s{attempt}",
                                  mutations=True)
            small = small_environment({**episode.env, "task_json": json.dumps(episode.task)}, episode.task,
                                      params.distractors, rng, compact=params.tool_schemas == "compact")
            played = play(ReferenceEpisode(small, episode.task, episode.calls), rng, distractors=-1)
        except Unusable as exc:
            reasons.append(str(exc))
            continue
        tools = json.loads(small["tools"])
        text = tokenizer.apply_chat_template(played.messages, tools=tools, tokenize=False)
        messages = played.messages
        verify_input = {"env": {k: v for k, v in small.items() if k != "db"}, "task": episode.task,
                        "limits": {"max_tokens": params.max_tokens}}
        row = make_row(id=f"{episode.task['task_id']}#played", source="small_envs", messages=messages, tools=tools,
                       verifier=EXECUTION, verify_input=verify_input,
                       tokens=len(tokenizer.encode(text, add_special_tokens=False)), domain=env["domain"],
                       env_id=small["env_id"], task_id=episode.task["task_id"], env_db=bytes(small["db"]))
        problem = verify_execution(messages, verify_input, bytes(small["db"])) or habit_problem(row)
        if problem is None and row["tokens"] > params.max_tokens:
            problem = f"trajectory of {row['tokens']} tokens exceeds max_tokens={params.max_tokens}"
        if problem is None:
            return small, episode.task, row
        reasons.append(problem)
    raise Unusable(f"no task of {params.task_attempts} verifies and fits: {reasons[-1]}")


# 3: a customer task per environment, played by the reference agent of the mid-training routes, held to the
# trajectory standard
# 4: a purpose names no fee
@stage(name=STAGE, version="4", inputs=("environments", "tokenizer"), params=SmallEnvsParams,
       outputs={
           "environments": ENVIRONMENT.contract(checks=(
               Check("golden_replays", golden_fails, description="the golden trajectory replays with reward 1"),
               *WORLD_CHECKS)),
           "tasks": TASK.contract(),
           "trajectories": standard_contract([STAGE], checks=(VARIED_SENTENCES,)),
           REJECTED: ENVIRONMENT_REJECTED.contract(),
       })
def small_envs(inputs: Mapping[str, Artifact], params: SmallEnvsParams, partition: str) -> dict[str, pl.DataFrame]:
    """Small environments (task tools plus distractors, compact schemas) with a customer task whose played
    trajectory fits max_tokens."""
    from inference.tokenizer import tokenizer_from_row
    from tasks.midtrain.synth import Unusable

    tokenizer = tokenizer_from_row(inputs["tokenizer"].read("tokenizer").row(0, named=True))
    envs, kept_tasks, trajectories, rejected = [], [], [], []
    environments = inputs["environments"].read("environments").sort("env_id")
    for i, env in enumerate(environments.iter_rows(named=True)):
        try:
            small, task, trajectory = played_trajectory(env, params, rng_for(params.seed, STAGE, partition, i),
                                                        tokenizer)
        except Unusable as exc:
            rejected.append({"env_id": env["env_id"], "domain": env["domain"],
                             "stage_step": "fit" if "exceeds max_tokens" in str(exc) else "task", "reason": str(exc)})
            continue
        envs.append(small)
        kept_tasks.append(task)
        trajectories.append(trajectory)
    return {"environments": ENVIRONMENT.frame(envs), "tasks": TASK.frame(kept_tasks),
            "trajectories": TRAJECTORY.frame(trajectories), REJECTED: ENVIRONMENT_REJECTED.frame(rejected)}

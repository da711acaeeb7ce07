"""Stage `task_filtered`: environment tasks a reference policy completes in some but not all of k agent-loop
rollouts (LongCat-Flash-Thinking-2601 section 3.3; the keep decision is tasks/difficulty.py)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import polars as pl
from pydantic import Field

from data_contracts.stage import Artifact, stage
from envgen.environment import Environment
from inference.agent import AgentConfig, Episode, run_episodes
from inference.engine import Engine
from inference.rollout import ROLLOUT_CONTRACT, rollouts_frame
from tasks.difficulty import FilterParams, filter_outputs, pass_count_figure, split_by_window, with_engine
from tasks.environments.records import FILTERED_TASK, FILTERED_TASK_REJECTED


class TaskFilterParams(FilterParams):
    max_turns: int = Field(8, gt=0, description="agent turns per rollout")
    concurrency: int = Field(64, gt=0, description="rollouts in flight at once (one engine batch per round)")


def filter_tasks(environments: pl.DataFrame, tasks: pl.DataFrame, engine: Engine,
                 params: TaskFilterParams) -> dict[str, pl.DataFrame]:
    """``k`` agent-loop rollouts of every task in its environment (a fresh database copy each), split by the
    pass-count window; the rollouts are kept as ``rollouts``."""
    records = {row["env_id"]: row for row in environments.iter_rows(named=True)}
    missing = sorted(set(tasks["env_id"]) - set(records))
    if missing:
        raise ValueError(f"tasks refer to environments missing from the environments output: {missing[:5]}")
    episodes = [
        Episode(id=f"{task['task_id']}#{j}", group_id=task["task_id"], task=task, env_id=task["env_id"],
                make_env=partial(Environment, records[task["env_id"]]), task_id=task["task_id"], sample_index=j)
        for task in tasks.iter_rows(named=True)
        for j in range(params.k)
    ]
    config = AgentConfig(sampling=params.sampling(), max_turns=params.max_turns, concurrency=params.concurrency,
                         seed=params.seed)
    rollouts = run_episodes(engine, episodes, config, source="task_filtered")
    groups = [rollouts[i:i + params.k] for i in range(0, len(rollouts), params.k)]
    unscorable = [all(t.stop_reason == "context_overflow" and not t.turns() for t in group) for group in groups]
    outputs = split_by_window(tasks, [sum(t.verified for t in group) for group in groups], params, kept="tasks",
                              unscorable=unscorable)
    outputs["rollouts"] = rollouts_frame(rollouts)
    return outputs


@stage(
    name="task_filtered",
    version="3",  # 2: the agent-loop samples are published as `rollouts`; 3: compact tool results
    inputs=("environments", "tiny_policy"),
    params=TaskFilterParams,
    outputs={**filter_outputs("tasks", FILTERED_TASK, FILTERED_TASK_REJECTED), "rollouts": ROLLOUT_CONTRACT},
    figure=pass_count_figure,
)
def task_filtered(inputs: Mapping[str, Artifact], params: TaskFilterParams, partition: str) -> dict[str, pl.DataFrame]:
    """Environment tasks a reference policy completes in some but not all of k agent-loop rollouts."""
    environments = inputs["environments"].read("environments")
    tasks = inputs["environments"].read("tasks")
    return with_engine(params, inputs, lambda engine: filter_tasks(environments, tasks, engine, params))

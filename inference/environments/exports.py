"""Environment tasks as the dataset rows other trainers read (``gymforge export --format trl|verl|skyrl``).

- ``trl``: ``prompt`` (the system prompt and the user's request as chat messages), ``environment`` (the name of its
  class among :func:`inference.environments.trl.environment_factories`) and ``task_id``, which ``reset(**row)``
  starts: ``load_dataset("parquet", ...)`` and ``GRPOTrainer(environment_factory=...)`` train on them as they are.
- ``verl``: verl's RL parquet (``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``), with the
  task's tool schemas in ``extra_info.tools`` and the episode to start in ``extra_info.interaction_kwargs``
  (``name: gymforge``, the task id and noise level) for an interaction that resets ``gymforge serve-env`` on it.
- ``skyrl``: SkyRL's (``data_source``, ``prompt``, ``env_class``, ``reward_spec``, ``extra_info``), the same episode
  in ``extra_info``.

The reward of all three is the rubric's, computed by the environment when the episode ends (``reward_model`` /
``reward_spec`` name the task, not an answer string). Nested values are JSON text where the keys differ per task
(tool schemas), so every row has the same parquet schema.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from envgen.small import DISTRACTORS
from inference.environments.tasks import ServedTasks, clean_task_id, noise_level_of
from inference.environments.trl import environment_name, task_tools

ExportFormat = Literal["trl", "verl", "skyrl"]
INTERACTION = "gymforge"  # the interaction (verl) / environment class (SkyRL) name the rows ask for


def prompt_messages(task: dict[str, Any]) -> list[dict[str, str]]:
    """What the agent starts from: the task's system prompt and the user's first message (as the environment's reset
    gives them with the profile user)."""
    return [{"role": "system", "content": task["system_prompt"]}, {"role": "user", "content": task["description"]}]


def environment_rows(served: ServedTasks, format: ExportFormat, distractors: int | None = DISTRACTORS) -> list[dict]:
    """One row per served task (sorted by task id) in ``format``; tools are each task's view (``distractors``
    others; None: every tool of its environment)."""
    rows = []
    for index, (task_id, task) in enumerate(sorted(served.tasks.items())):
        tools = task_tools(served, task, distractors)
        episode = {"task_id": task_id, "env_id": task["env_id"], "noise_level": noise_level_of(task)}
        if format == "trl":
            rows.append({"prompt": prompt_messages(task), "environment": environment_name(task, tools), **episode,
                         "domain": task.get("domain"), "clean_task_id": clean_task_id(task)})
            continue
        extra = {"index": index, "split": "train", **episode, "tools": json.dumps(tools),
                 "interaction_kwargs": {"name": INTERACTION, **episode}}
        common = {"data_source": f"gymforge/{served.source.split('/')[0]}", "prompt": prompt_messages(task)}
        if format == "verl":
            rows.append({**common, "ability": "tool_use", "agent_name": "tool_agent",
                         "reward_model": {"style": "rule", "ground_truth": task_id}, "extra_info": extra})
        else:
            rows.append({**common, "env_class": INTERACTION,
                         "reward_spec": {"method": "rule", "ground_truth": task_id}, "extra_info": extra})
    return rows

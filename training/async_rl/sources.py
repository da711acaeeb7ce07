"""Rollout sources: the RL tasks an artifact offers, read by what its outputs hold, not by which stage made it.

- Prompts: an output with ``prompt`` and ``answer`` columns (``rl_mix``, ``keychain`` and its ``regular`` output,
  ``needles``). The reward is the row's ``reward_fn`` when it has one (``rl_mix``), else the hardened two-way match
  (``needle_all`` for needles); the source is the row's ``category``, else the output's name.
- QA seeds: an output with ``question``, ``answer`` and ``docs`` columns (``qa_filtered``, ``qa_seeds``), asked as
  the difficulty filter asked them (its ``max_prompt_tokens``), so a filtered item's pass rate is that of the prompt
  RL trains on; source ``qa``, reward the two-way match.
- Tool environments: a ``tasks`` output whose rows name an ``env_id`` (``environments``, ``small_envs``,
  ``task_filtered``, ``noisy_tasks``), their environments from any input's ``environments`` output. A noisy twin
  keeps its level, so the noise curriculum can admit it in turn.

With ``small_tools`` set, every environment task is offered as a small environment (its golden tools plus that many
distractors, compact schemas: ``envgen.small``), the view the cold-start trajectories of ``small_envs`` and the
evaluate stage give a short-context policy, so what RL and held-out scoring show the policy matches what it was
trained on. The distractors are drawn per clean task, so a noisy twin is offered the tools of its clean task.

The difficulty filters' pass counts become prior pass rates (the scheduler's oversampling and curriculum start from
them); the capability tag of the curriculum's second axis is counted from the golden chain (1-2 calls: basic tool
use, 3-4: multi-step planning, more: autonomous decisions) and is ``planning`` for multi-hop prompts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from data_contracts.stage import REJECTED, Artifact, StageError
from training.async_rl.scheduling import RLTask

PROMPT_REWARDS = {"needles": "needle_all"}
"""Rewards of prompt outputs without a reward_fn column, by output name; the rest use ``DEFAULT_REWARD``."""
DEFAULT_REWARD = "two_way"


def load_tasks(inputs: Mapping[str, Artifact], small_tools: int | None = None) -> list[RLTask]:
    """Every RL task the inputs (by stage name; model artifacts are skipped) offer, in a stable order; a StageError
    names an input that offers none, or a task whose environment no input holds. ``small_tools``: environments as
    their task's tools plus that many distractors (None: as built)."""
    environments: dict[str, dict[str, Any]] = {}
    for artifact in inputs.values():
        if "environments" in artifact.outputs:
            environments.update((row["env_id"], row) for row in artifact.read("environments").iter_rows(named=True))
    tasks: list[RLTask] = []
    for name, artifact in sorted(inputs.items()):
        if artifact.manifest.get("kind") == "model":
            continue
        found = (_prompt_tasks(name, artifact) + _qa_seed_tasks(artifact)
                 + _environment_tasks(name, artifact, environments, small_tools))
        if not found:
            raise StageError(f"input {name}/{artifact.key} offers no RL tasks: it has no output with prompt and "
                             "answer (or question, answer and docs) columns and no tasks output with env_id (its "
                             f"outputs: {', '.join(artifact.outputs)})")
        tasks += found
    ids = [task.task_id for task in tasks]
    if len(set(ids)) != len(ids):
        raise StageError("two inputs offer tasks with the same id; train on one of them")
    return tasks


def _offered(artifact: Artifact) -> list[str]:
    """The outputs that may hold tasks: not what the stage set aside (a filter's too easy or too hard items)."""
    return [output for output in artifact.outputs if output != REJECTED]


def _columns(artifact: Artifact, output: str) -> set[str]:
    return set(artifact.scan(output).collect_schema().names())


def _prompt_tasks(stage: str, artifact: Artifact) -> list[RLTask]:
    from envgen.rewards import REWARDS

    tasks = []
    for output in _offered(artifact):
        if not {"prompt", "answer"} <= _columns(artifact, output):
            continue
        frame = artifact.read(output)
        if "curriculum_stage" in frame.columns:  # rl_mix: an item has a row per curriculum stage; train on it once
            frame = frame.unique("id", keep="first", maintain_order=True)
        for row in frame.iter_rows(named=True):
            reward = row.get("reward_fn") or PROMPT_REWARDS.get(stage, DEFAULT_REWARD)
            if reward not in REWARDS:
                raise StageError(f"{stage}/{artifact.key} row {row['id']}: unknown reward_fn {reward!r}")
            source = row.get("category") or output
            payload = {"prompt": row["prompt"], "answer": row["answer"], "aliases": list(row.get("aliases") or []),
                       "reward_fn": reward}
            tasks.append(RLTask(f"{source}:{row['id']}", "prompt", source, payload,
                                capability="planning" if source in ("keychain", "qa", "regular") else "basic",
                                prior_pass_rate=_pass_rate(row)))
    return tasks


def _qa_seed_tasks(artifact: Artifact) -> list[RLTask]:
    from inference.agent import QA_PROMPT_TOKENS, qa_prompt_items

    budget = int(artifact.manifest.get("params", {}).get("max_prompt_tokens") or QA_PROMPT_TOKENS)
    tasks = []
    for output in _offered(artifact):
        if not {"question", "answer", "docs"} <= _columns(artifact, output):
            continue
        frame = artifact.read(output)
        passes = {str(row["id"]): _pass_rate(row) for row in frame.iter_rows(named=True)}
        for item in qa_prompt_items(frame, budget):
            payload = {"prompt": item.messages, "answer": item.columns["answer"],
                       "aliases": list(item.columns["aliases"]), "reward_fn": DEFAULT_REWARD}
            tasks.append(RLTask(f"qa:{item.id}", "prompt", "qa", payload, capability="planning",
                                prior_pass_rate=passes[item.id]))
    return tasks


def _environment_tasks(stage: str, artifact: Artifact, environments: Mapping[str, Mapping[str, Any]],
                       small_tools: int | None) -> list[RLTask]:
    from envgen.small import task_view

    if "tasks" not in artifact.outputs or "env_id" not in _columns(artifact, "tasks"):
        return []
    frame = artifact.read("tasks")
    tasks = []
    for row in frame.iter_rows(named=True):
        env = environments.get(row["env_id"])
        if env is None:
            raise StageError(f"task {row['task_id']} of {stage}/{artifact.key} runs in environment "
                             f"{row['env_id']}, which no input holds: add the artifact with its environments output")
        if small_tools is not None:
            env = task_view(env, row, small_tools)
        golden = json.loads(row["golden_actions"]) if isinstance(row["golden_actions"], str) else row["golden_actions"]
        calls = len(golden or [])
        tasks.append(RLTask(
            row["task_id"], "env", row.get("domain") or env["domain"], {"env": env, "task": row},
            capability="basic" if calls <= 2 else "planning" if calls <= 4 else "autonomy",
            prior_pass_rate=_pass_rate(row), noise_level=int(row.get("noise_level") or 0),
            clean_task_id=row.get("clean_task_id")))
    return tasks


def _pass_rate(row: Mapping[str, Any]) -> float | None:
    count, k = row.get("pass_count"), row.get("pass_k")
    return count / k if count is not None and k else None

"""Evaluation items: one uniform shape for a prompt scored by a reward and a task played in its environment, with
the attributes the summaries break results down by.

Tasks come from ``training.async_rl.sources.load_tasks`` (the one reader of RL-ready artifacts: prompt outputs and
tasks with their environments), handed in by the ``evaluate`` stage as objects of :class:`TaskLike`'s shape; the
two suites whose artifacts hold no prompt (QA seeds, math problems) are read here, with the prompts the RL mixture
gives the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import polars as pl

from envgen.rewards import BOXED_INSTRUCTION
from inference.agent import qa_prompt
from inference.engine import Message

ItemKind = Literal["prompt", "env"]


class TaskLike(Protocol):
    """The fields of ``training.async_rl.scheduling.RLTask`` an evaluation reads."""

    task_id: str
    kind: Literal["env", "prompt"]
    source: str
    payload: Mapping[str, Any]
    noise_level: int
    clean_task_id: str | None


@dataclass(frozen=True)
class EvalItem:
    """A prompt (``messages``, scored by the reward ``reward`` against ``answer``/``aliases``) or a task (``env``
    and ``task`` records, scored by the environment's rubric)."""

    id: str
    kind: ItemKind
    source: str
    messages: Sequence[Message] = ()
    reward: str | None = None
    answer: Any = None
    aliases: Sequence[str] = ()
    env: Mapping[str, Any] | None = None
    task: Mapping[str, Any] | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    """domain, difficulty, length, noise_level, noise_types, clean_task_id, run (see the eval_item record)."""
    known_as: tuple[str, ...] = ()
    """Every id the item's data is known by (its row, seed and task ids): what training-data overlap is checked on."""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def prompt_items(tasks: Sequence[TaskLike], rows: Mapping[str, Mapping[str, Any]]) -> list[EvalItem]:
    """Prompt tasks as items; ``rows`` (task id -> the artifact row) adds the length, hops and seed of each."""
    items = []
    for task in tasks:
        if task.kind != "prompt":
            continue
        row = rows.get(task.task_id, {})
        hops = row.get("hops")
        items.append(EvalItem(
            id=task.task_id, kind="prompt", source=task.source, messages=_json(task.payload["prompt"]),
            reward=task.payload["reward_fn"], answer=task.payload["answer"], aliases=tuple(task.payload["aliases"]),
            attributes={"domain": row.get("source") or task.source, "length": row.get("tokens"),
                        "difficulty": f"{hops} hops" if hops else row.get("task")},
            known_as=_ids(task.task_id.partition(":")[2], row.get("seed_id"), row.get("source_id"))))
    return items


def output_rows(outputs: Mapping[str, pl.DataFrame]) -> dict[str, dict[str, Any]]:
    """Rows of prompt outputs keyed as ``load_tasks`` names their tasks: ``<category or output>:<id>``."""
    rows: dict[str, dict[str, Any]] = {}
    for name, frame in outputs.items():
        if "id" not in frame.columns:
            continue
        for row in frame.iter_rows(named=True):
            rows[f"{row.get('category') or name}:{row['id']}"] = row
    return rows


def env_items(tasks: Sequence[TaskLike]) -> list[EvalItem]:
    """Environment tasks as items: domain, run, difficulty (golden calls), noise level and transforms."""
    items = []
    for task in tasks:
        if task.kind != "env":
            continue
        record = task.payload["task"]
        calls = len(_json(record.get("golden_actions")) or [])
        transforms = record.get("transforms") or []
        items.append(EvalItem(
            id=task.task_id, kind="env", source=task.source, env=task.payload["env"], task=record,
            attributes={"domain": record.get("domain") or task.source, "run": record.get("run"),
                        "difficulty": f"{calls} calls", "golden_calls": calls,
                        "noise_level": int(task.noise_level or 0), "noise_types": list(transforms),
                        "clean_task_id": task.clean_task_id},
            known_as=_ids(task.task_id, record.get("env_id"), task.clean_task_id)))
    return items


def qa_items(seeds: pl.DataFrame, split: str = "eval") -> list[EvalItem]:
    """Held-out multi-hop QA: the seeds of ``split`` asked on their own documents (the RL mixture's QA prompt),
    scored by the hardened two-way match."""
    items = []
    for row in seeds.filter(pl.col("split") == split).iter_rows(named=True):
        items.append(EvalItem(
            id=row["id"], kind="prompt", source=row["source"], messages=qa_prompt(row["question"], _json(row["docs"])),
            reward="two_way", answer=row["answer"], aliases=tuple(row.get("aliases") or ()),
            attributes={"domain": row["source"], "difficulty": f"{row.get('hops')} hops"},
            known_as=(row["id"],)))
    return items


def math_items(problems: pl.DataFrame) -> list[EvalItem]:
    """Math problems asked on their own, each scored by the reward its row names (math, or choice)."""
    return [EvalItem(
        id=row["id"], kind="prompt", source="math", messages=[{"role": "user", "content": f"{row['question']}\n{BOXED_INSTRUCTION}"}],
        reward=row["reward_fn"], answer=row["answer"], attributes={"domain": row["source"], "difficulty": row["kind"]},
        known_as=(row["id"],)) for row in problems.iter_rows(named=True)]


def _ids(*ids: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(i) for i in ids if i))

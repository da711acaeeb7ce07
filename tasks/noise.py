"""Noise stages: noisy training twins per curriculum level, and noisy evaluation twins of unseen environments.

LongCat-Flash-Thinking-2601, section 3.3.3 "Robust RL: Training with Environmental Noise". For every clean task
of the input environments and every requested level, ``envgen.noise.solvability`` builds the noisy twin (recorded
instruction transforms and a seeded tool-fault schedule), re-verifies it by execution with the robust reference
agent, and runs the naive reference agent on both twins. Twins the robust agent cannot solve go to ``rejected``
with the reason; the kept ones carry their clean twin's id, the full noise record, and both agents' successes.

- ``noisy_tasks`` (input ``environments``): the curriculum's training tasks, one twin per level 1..L.
- ``noisy_eval`` (input ``eval_random_envs``): noisy evaluation twins, like the report's tau2-Bench-Noise and
  VitaBench-Noise (Table 1): the robustness gap is success on the clean tasks minus success on these twins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import polars as pl
from pydantic import Field, field_validator, model_validator

from data_contracts.stage import (
    REJECTED,
    REJECTED_CONTRACT,
    Artifact,
    Check,
    Contract,
    Expect,
    Params,
    seed_for,
    stage,
)

NOISE_COLUMNS: dict[str, Any] = {
    "task_id": pl.String,
    "env_id": pl.String,
    "clean_task_id": pl.String,
    "noise_level": pl.Int64,
    "transforms": pl.List(pl.String),
    "description": pl.String,
    "user_profile": pl.String,
    "rubric": pl.String,
    "golden_actions": pl.String,
    "noise": pl.String,
    "robust_success": pl.Boolean,
    "naive_success": pl.Boolean,
    "robust_clean_success": pl.Boolean,
    "naive_clean_success": pl.Boolean,
    "naive_by_transform": pl.String,
    "scored": pl.Boolean,
}


class NoiseParams(Params):
    levels: tuple[int, ...] = Field((1, 2, 3, 4), description="Noise levels to build a twin at, each in 1..max_level.")
    max_level: int = Field(4, description="Highest curriculum level L (levels are 0..L; 0 is the clean task).")
    seed: int = Field(0, description="Root seed; each twin draws from seed_for(seed, stage, partition/task_id, level).")
    max_tasks: int | None = Field(None, description="Use at most this many clean tasks (in input order); None: all.")
    max_steps: int = Field(40, description="Turn budget of each reference-agent episode.")

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"levels must be a non-empty list of distinct levels, got {list(v)}")
        return tuple(sorted(v))

    @field_validator("max_tasks")
    @classmethod
    def _max_tasks(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"max_tasks must be >= 1 or null (all tasks), got {v}")
        return v

    @model_validator(mode="after")
    def _in_range(self) -> NoiseParams:
        if self.max_level < 1:
            raise ValueError(f"max_level must be >= 1 (the report's setting is 4), got {self.max_level}")
        bad = [lvl for lvl in self.levels if not 1 <= lvl <= self.max_level]
        if bad:
            raise ValueError(f"levels {bad} are outside 1..max_level={self.max_level}; set levels or max_level")
        return self


class NoiseEvalParams(NoiseParams):
    levels: tuple[int, ...] = Field((4,), description="Levels of the evaluation twins (default: the hardest).")


def _noise_of(row: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(row["noise"]) if row.get("noise") else {}


def _bad_reference(frame: pl.DataFrame) -> list[bool]:
    """Every noisy task names its clean twin, in its id and in its noise record."""
    return [
        r["clean_task_id"] is None or r["task_id"] != f"{r['clean_task_id']}~noise{r['noise_level']}"
        or _noise_of(r).get("clean_task_id") != r["clean_task_id"]
        for r in frame.iter_rows(named=True)
    ]


def _unrecorded_transforms(frame: pl.DataFrame) -> list[bool]:
    """Every transform is recorded: the transforms column equals the record's kinds, each with a hint and
    recovery, and a level above 0 applied at least one."""
    out = []
    for r in frame.iter_rows(named=True):
        noise = _noise_of(r)
        kinds = [t.get("kind") for t in noise.get("transforms", [])]
        complete = all(t.get("hint") and t.get("recovery") for t in noise.get("transforms", []))
        out.append(kinds != list(r["transforms"]) or not complete or noise.get("level") != r["noise_level"]
                   or (r["noise_level"] > 0 and not kinds))
    return out


TASKS_CONTRACT = Contract(
    columns=NOISE_COLUMNS,
    expectations=(
        Expect("ExpectColumnValuesToBeUnique", column="task_id"),
        Expect("ExpectColumnValuesToNotBeNull", column="clean_task_id"),
        Expect("ExpectColumnValuesToBeBetween", column="noise_level", min_value=1),
        # The solvability constraint: every kept twin was solved by the robust reference agent.
        Expect("ExpectColumnValuesToBeInSet", column="robust_success", value_set=[True]),
    ),
    checks=(
        Check("references_clean_task", _bad_reference, description="task_id, clean_task_id and noise record agree"),
        Check("transforms_recorded", _unrecorded_transforms, description="every transform is in the noise record"),
    ),
)

REJECTED_NOISE_CONTRACT = Contract(
    columns={**REJECTED_CONTRACT.columns, **{k: NOISE_COLUMNS[k] for k in (
        "task_id", "clean_task_id", "env_id", "noise_level", "transforms", "noise", "robust_success",
        "naive_success", "robust_clean_success", "naive_clean_success", "naive_by_transform", "scored")}},
    expectations=(Expect("ExpectColumnValuesToNotBeNull", column="reason"),),
)

OUTPUTS = {"tasks": TASKS_CONTRACT, REJECTED: REJECTED_NOISE_CONTRACT}


def build_noisy(inputs: Mapping[str, Artifact], source: str, params: NoiseParams, stage_name: str,
                partition: str) -> dict[str, pl.DataFrame]:
    """Twins of every clean task of ``inputs[source]`` at ``params.levels``, verified; shared by both stages."""
    from envgen.noise.curriculum import noise_level
    from envgen.noise.environment import NoisyEnvironment
    from envgen.noise.solvability import noisy_twins

    envs = {r["env_id"]: r for r in inputs[source].read("environments").iter_rows(named=True)}
    tasks = inputs[source].read("tasks")
    if params.max_tasks is not None:
        tasks = tasks.head(params.max_tasks)
    levels = [noise_level(k, params.max_level) for k in params.levels]
    kept: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    live: dict[str, NoisyEnvironment] = {}
    for task in tasks.iter_rows(named=True):
        env_id = task["env_id"]
        if env_id not in envs:
            raise ValueError(f"{stage_name}: task {task['task_id']!r} names env_id {env_id!r}, which is not in the "
                             f"{source} artifact's environments output")
        env = live.setdefault(env_id, NoisyEnvironment(envs[env_id], max_steps=params.max_steps))
        seeds = [seed_for(params.seed, stage_name, f"{partition}/{task['task_id']}", lvl.level) for lvl in levels]
        clean, verdicts = noisy_twins(env, task, levels, seeds)
        for v in verdicts:
            row = {**v.task, "robust_success": v.kept and v.robust.success, "naive_success": v.naive.success,
                   "robust_clean_success": clean.robust.success, "naive_clean_success": clean.naive.success,
                   "naive_by_transform": json.dumps(dict(v.naive_by_transform), sort_keys=True),
                   "scored": v.robust.scored}
            if v.kept:
                kept.append(row)
            else:
                rejected.append({**row, "reason": v.reason})
    for env in live.values():
        env.close()
    extra = [c for c in tasks.columns if c not in NOISE_COLUMNS]
    kept_frame = pl.DataFrame(kept, schema={**NOISE_COLUMNS, **{c: tasks.schema[c] for c in extra}})
    rejected_schema = REJECTED_NOISE_CONTRACT.columns
    rejected_frame = pl.DataFrame([{k: r.get(k) for k in rejected_schema} for r in rejected], schema=rejected_schema)
    return {"tasks": kept_frame, REJECTED: rejected_frame}


@stage(name="noisy_tasks", version="1", params=NoiseParams, inputs=("environments",), outputs=OUTPUTS)
def noisy_tasks(inputs: Mapping[str, Artifact], params: NoiseParams, partition: str) -> dict[str, pl.DataFrame]:
    """Noisy training twins of every environment task at each curriculum level, verified solvable by execution."""
    return build_noisy(inputs, "environments", params, "noisy_tasks", partition)


@stage(name="noisy_eval", version="1", params=NoiseEvalParams, inputs=("eval_random_envs",), outputs=OUTPUTS)
def noisy_eval(inputs: Mapping[str, Artifact], params: NoiseEvalParams, partition: str) -> dict[str, pl.DataFrame]:
    """Noisy evaluation twins of the unseen random environments' tasks (the -Noise benchmarks of Table 1)."""
    return build_noisy(inputs, "eval_random_envs", params, "noisy_eval", partition)

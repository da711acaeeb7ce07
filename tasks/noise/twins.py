"""Noisy twins of clean tasks, as the noise stages build them (LongCat-Flash-Thinking-2601, section 3.3.3 "Robust RL:
Training with Environmental Noise"). For every clean task and every requested level, ``solvability.noisy_twins``
builds the twin (recorded instruction transforms and a seeded tool-fault schedule), re-verifies it by execution with
the robust reference agent, and runs the naive reference agent on both twins. Twins the robust agent cannot solve
are rejected with the reason; the kept ones carry their clean twin's id, the full noise record, and both agents'
successes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import Field, field_validator, model_validator

from data_contracts.schemas import Record, between, in_set, not_null
from data_contracts.stage import REJECTED, Artifact, Check, Contract, Params, seed_for
from envgen.checks import database_keys, key_pattern, keys_said, user_texts
from envgen.domain_spec import domain_paths, load_domain
from envgen.environment import domain_for
from envgen.noise.curriculum import noise_level
from envgen.noise.environment import NoisyEnvironment
from tasks.noise.records import NOISE_REJECTED
from tasks.noise.solvability import noisy_twins, summary_frame


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


def _keys_in_user_text(frame: pl.DataFrame) -> list[bool]:
    """A twin whose request or profile states a key shaped like its domain's generated keys (checked for shipped
    domains; ``build_twins`` checks every twin against its database's keys)."""
    shipped = domain_paths()
    return [r["domain"] in shipped and bool(keys_said(user_texts(r), key_pattern(load_domain(r["domain"]))))
            for r in frame.iter_rows(named=True)]


def noise_success_figure(artifact: Artifact, path: Path) -> None:
    """The figure of a noisy twins artifact: naive and robust success per transform and level."""
    from tasks.noise.plot import plot_noise_success  # matplotlib, only where a figure is drawn

    plot_noise_success(summary_frame(artifact.read("tasks"), artifact.read(REJECTED)), path)


def twins_contract(record: Record) -> Contract:
    return record.contract(
        expectations=(
            *not_null("clean_task_id"),
            between("noise_level", min_value=1),
            # The solvability constraint: every kept twin was solved by the robust reference agent.
            in_set("robust_success", [True]),
        ),
        checks=(
            Check("references_clean_task", _bad_reference, description="task_id, clean_task_id and noise record agree"),
            Check("transforms_recorded", _unrecorded_transforms, description="every transform is in the noise record"),
            Check("users_state_what_people_know", _keys_in_user_text,
                  description="no internal key (a generated primary key) in the twin's request or profile"),
        ),
    )


def build_twins(environments: pl.DataFrame, tasks: pl.DataFrame, params: NoiseParams, stage_name: str,
                partition: str, record: Record) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, rejected): twins of every clean task at ``params.levels``, each verified by execution; ``record`` is
    the kept twins' record (an evaluation set's carries its run)."""
    envs = {r["env_id"]: r for r in environments.iter_rows(named=True)}
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
                             "environments output")
        env = live.setdefault(env_id, NoisyEnvironment(envs[env_id], max_steps=params.max_steps))
        seeds = [seed_for(params.seed, stage_name, f"{partition}/{task['task_id']}", lvl.level) for lvl in levels]
        clean, verdicts = noisy_twins(env, task, levels, seeds)
        keys = database_keys(domain_for(envs[env_id]), envs[env_id]["db"])
        for v in verdicts:
            said = keys_said(user_texts(v.task), keys)
            if said and v.kept:
                v = replace(v, reason=f"internal key {said[0]} in the user's words")
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
    return (record.frame([{k: r.get(k) for k in record.columns} for r in kept]),
            NOISE_REJECTED.frame([{k: r.get(k) for k in NOISE_REJECTED.columns} for r in rejected]))

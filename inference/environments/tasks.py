"""The tasks an environment artifact offers, as a server or a trainer chooses them.

An environment artifact (``environments``, ``small_envs``, ``eval_random_envs``) holds ``environments`` and
``tasks`` outputs; ``noisy_tasks`` holds noisy twins only, their environments and clean tasks in its input
artifact. Every task has a noise level (0 for a clean task) and a clean task id (its own when clean), so a client
asks for a task, for a task at a noise level (its twin), or for any task by seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgen.environment import json_field


class TaskNotServed(ValueError):
    """A reset asked for a task, level or seed the served artifact does not offer; the message says what it does."""


def noise_level_of(task: Mapping[str, Any]) -> int:
    """A task's noise level: its ``noise_level`` column, else its noise record's level, else 0 (clean)."""
    if task.get("noise_level") is not None:
        return int(task["noise_level"])
    noise = json_field(task.get("noise") or "{}") or {}
    return int(noise.get("level") or 0)


def clean_task_id(task: Mapping[str, Any]) -> str:
    return str(task.get("clean_task_id") or task["task_id"])


@dataclass
class ServedTasks:
    """Environment records by ``env_id`` and task records by ``task_id``, with what they came from."""

    environments: dict[str, dict[str, Any]]
    tasks: dict[str, dict[str, Any]]
    source: str = "fixture"  # the artifact, as people name it: stage/key
    version: str = ""  # the stage version that made it
    _twins: dict[tuple[str, int], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError(f"{self.source} has no tasks to serve")
        missing = sorted({t["env_id"] for t in self.tasks.values()} - set(self.environments))
        if missing:
            raise ValueError(f"{self.source}: tasks name environments it does not hold: {missing[:5]}")
        self._twins = {(clean_task_id(t), noise_level_of(t)): tid for tid, t in self.tasks.items()}

    @classmethod
    def from_rows(cls, environments: Iterable[Mapping[str, Any]], tasks: Iterable[Mapping[str, Any]],
                  source: str = "fixture", version: str = "") -> ServedTasks:
        return cls({e["env_id"]: dict(e) for e in environments}, {t["task_id"]: dict(t) for t in tasks},
                   source, version)

    @classmethod
    def from_artifact(cls, artifact: Any, inputs: Mapping[str, Any]) -> ServedTasks:
        """The tasks of a published artifact; ``inputs`` are its published input artifacts by stage, which hold the
        environments (and clean tasks) of an artifact of twins such as ``noisy_tasks``."""
        if "tasks" not in artifact.outputs:
            raise ValueError(f"{artifact.stage}/{artifact.key} has no tasks output (its outputs: "
                             f"{', '.join(artifact.outputs)}); serve environments, small_envs, noisy_tasks or "
                             "eval_random_envs")
        holders = [artifact] if "environments" in artifact.outputs else list(inputs.values())
        environments = [row for a in holders if "environments" in a.outputs
                        for row in a.read("environments").iter_rows(named=True)]
        tasks = artifact.read("tasks").to_dicts()
        if "environments" not in artifact.outputs:  # twins: their clean tasks are level 0 of the same ids
            tasks += [row for a in inputs.values() if "tasks" in a.outputs for row in a.read("tasks").to_dicts()]
        return cls.from_rows(environments, tasks, f"{artifact.stage}/{artifact.key}",
                             str(artifact.manifest.get("version", "")))

    def environment_of(self, task: Mapping[str, Any]) -> dict[str, Any]:
        return self.environments[task["env_id"]]

    def levels(self, task_id: str) -> list[int]:
        clean = clean_task_id(self.tasks[task_id])
        return sorted(level for (c, level) in self._twins if c == clean)

    def choose(self, task_id: str | None = None, seed: int | None = None,
               noise_level: int | None = None) -> dict[str, Any]:
        """The task a reset asks for: ``task_id`` (at ``noise_level``: its twin at that level), else one drawn by
        ``seed`` among the tasks at ``noise_level`` (any level when None; no seed: drawn at random)."""
        if task_id is not None:
            if task_id not in self.tasks:
                raise TaskNotServed(f"unknown task_id {task_id!r}: {self.source} serves {len(self.tasks)} tasks "
                                    f"(GET /tasks lists them)")
            if noise_level is None:
                return self.tasks[task_id]
            twin = self._twins.get((clean_task_id(self.tasks[task_id]), noise_level))
            if twin is None:
                raise TaskNotServed(f"task {task_id!r} has no twin at noise_level {noise_level}; its levels are "
                                    f"{self.levels(task_id)}")
            return self.tasks[twin]
        ids = sorted(tid for tid, t in self.tasks.items() if noise_level is None or noise_level_of(t) == noise_level)
        if not ids:
            served = sorted({noise_level_of(t) for t in self.tasks.values()})
            raise TaskNotServed(f"no task at noise_level {noise_level}; {self.source} serves levels {served}")
        return self.tasks[random.Random(seed).choice(ids)]

    def describe(self) -> dict[str, Any]:
        """What is served, for ``/health`` and ``/tasks``: the artifact, its version and counts."""
        levels: dict[int, int] = {}
        for task in self.tasks.values():
            levels[noise_level_of(task)] = levels.get(noise_level_of(task), 0) + 1
        return {"artifact": self.source, "version": self.version, "tasks": len(self.tasks),
                "environments": len(self.environments),
                "domains": sorted({e["domain"] for e in self.environments.values()}),
                "noise_levels": {str(k): v for k, v in sorted(levels.items())}}

    def listing(self) -> list[dict[str, Any]]:
        """One line per task: its id, environment, domain, noise level and clean twin."""
        return [{"task_id": tid, "env_id": t["env_id"], "domain": t.get("domain"), "noise_level": noise_level_of(t),
                 "clean_task_id": clean_task_id(t)} for tid, t in sorted(self.tasks.items())]


def golden_actions(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A task's golden actions with their arguments as objects (as an MCP client sends them)."""
    return [{"name": a["name"], "arguments": json_field(a["arguments"]) if isinstance(a["arguments"], str)
             else a["arguments"]} for a in json_field(task["golden_actions"])]



def inputs_of(artifact: Any, store: Any) -> dict[str, Any]:
    """The published input artifacts of ``artifact`` by stage (they hold a twin artifact's environments)."""
    inputs = {}
    for stage, key in (artifact.manifest.get("input_keys") or {}).items():
        found = store.get(stage, key)
        if found is None:
            raise ValueError(f"{artifact.stage}/{artifact.key} reads {stage}/{key}, which is not published in "
                             f"{store.root}")
        inputs[stage] = found
    return inputs


def served_artifact(ref: str, data_dir: str | Path | None = None) -> ServedTasks:
    """The tasks of the published artifact ``ref`` names (its key, or a stage with one published artifact) in the
    data root (``data_dir``, else ``$GYMFORGE_DATA``, else ``./data``), with its inputs' environments."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store, published

    root = data_root(data_dir)
    store = open_store(root)
    artifact = published(Catalog(root), store, ref)
    return ServedTasks.from_artifact(artifact, inputs_of(artifact, store))

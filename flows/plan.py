"""The plan of a data DAG run, without Prefect: the targets and their upstream stages in order, each with its params
and artifact key. Commands plan first, so a bad stage name, profile or param is one error before Prefect, Dask or
a server is loaded or started (flows/dag.py runs the plan)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from data_contracts.runner import plan, planned_keys
from data_contracts.stage import StageError
from flows.profiles import Overrides, stage_params
from flows.registry import discover, stage_named


@dataclass(frozen=True)
class PlannedStage:
    name: str
    key: str  # as computed from this process's copy of the stages; the summary reports the published one
    params_json: str
    inputs: tuple[str, ...]
    force: bool


def plan_dag(
    targets: Sequence[str] | None,
    profile: str,
    partition: str,
    *,
    overrides: Overrides | None = None,
    force: bool = False,
) -> list[PlannedStage]:
    """The targets (default: every registered stage) and their upstream closure in topological order, each with
    its params and artifact key; ``force`` applies to the targets only."""
    params = stage_params(profile, overrides)
    names = list(targets) if targets else sorted(n for n, s in discover().items() if s.resources == "cpu")
    order = plan(names, stage_named, params)
    for stage in order:
        if stage.resources != "cpu":  # a Dask worker is a daemonic process: no torch workers, no vLLM (DESIGN.md 4)
            raise StageError(f"stage {stage.name!r} needs a GPU worker, not the data DAG: run it with its flow "
                             "(`gymforge train ...`) or its deployment on the gpu pool")
    keys = planned_keys(order, params, partition)
    return [PlannedStage(stage.name, keys[stage.name], json.dumps(params.get(stage.name, {}), sort_keys=True),
                         stage.reads(stage.parse_params(params.get(stage.name, {}))), force and stage.name in names)
            for stage in order]

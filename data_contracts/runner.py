"""Run a Stage through the store: key, cache, run, gate, publish or quarantine (DESIGN.md sections 2-3).

This is the library path and imports no Prefect: ``flows/`` wraps :func:`execute_stage` in one generic Prefect
task, and :func:`materialize` runs a DAG serially in-process for notebooks and tests.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx
import polars as pl
from pydantic import BaseModel, Field

from data_contracts.catalog import Catalog
from data_contracts.gate import GateReport, validate, validate_directory
from data_contracts.stage import (
    REJECTED,
    REJECTED_CONTRACT,
    STAGES,
    Contract,
    Params,
    Stage,
    StageError,
    get_stage,
)
from data_contracts.store import ArtifactStore, PublishedArtifact


class ContractViolation(RuntimeError):
    """An output failed a critical expectation; the artifact is quarantined at ``quarantine_path``."""

    def __init__(self, stage: str, partition: str, key: str, reports: Mapping[str, GateReport],
                 quarantine_path: Path | str):
        self.stage, self.partition, self.key = stage, partition, key
        self.reports = dict(reports)
        self.quarantine_path = quarantine_path
        lines = [f"stage {stage!r} partition {partition!r} (key {key}) failed its contract:"]
        for output, report in sorted(self.reports.items()):
            for failure in report.failures("critical"):
                lines.append(f"  output {output!r}: {failure.name}: {failure.message}")
        lines.append(f"quarantined at {quarantine_path}")
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple:  # crosses Dask worker processes: rebuild from the fields, not the message
        return type(self), (self.stage, self.partition, self.key, self.reports, self.quarantine_path)


class UpstreamMissing(RuntimeError):
    """An input artifact is not published (never run, deleted, or quarantined)."""

    def __init__(self, stage: str, input_stage: str, input_key: str, quarantined: Path | str | None):
        self.stage, self.input_stage, self.input_key, self.quarantined = stage, input_stage, input_key, quarantined
        why = f"it is quarantined at {quarantined}" if quarantined else "it is not published"
        super().__init__(
            f"stage {stage!r} cannot run: input {input_stage!r} artifact {input_key} is missing ({why}); "
            f"materialize {input_stage!r} first"
        )

    def __reduce__(self) -> tuple:
        return type(self), (self.stage, self.input_stage, self.input_key, self.quarantined)


class StageRun(BaseModel):
    """What one execution of a stage on one partition produced (also the row of the Prefect table artifact)."""

    stage: str
    key: str
    partition: str
    cached: bool
    path: str
    outputs: dict[str, int] = Field(description="Rows per output.")
    bytes: int
    timings: dict[str, float] = Field(default_factory=dict, description="run_s, gate_s, publish_s; empty if cached.")
    contract: dict[str, bool] = Field(default_factory=dict, description="Gate verdict per output.")

    @classmethod
    def from_artifact(cls, artifact: PublishedArtifact, *, cached: bool, timings: Mapping[str, float] | None = None) -> StageRun:
        return cls(
            stage=artifact.stage, key=artifact.key, partition=artifact.manifest["partition"], cached=cached,
            path=artifact.location, outputs=artifact.rows, bytes=artifact.bytes,
            timings=dict(timings or {}),
            contract={name: summary["passed"] for name, summary in artifact.manifest.get("contract", {}).items()},
        )


def output_contracts(stage: Stage) -> dict[str, Contract]:
    """The declared contracts, plus ``REJECTED_CONTRACT`` for a ``rejected`` output the stage did not declare."""
    return {REJECTED: REJECTED_CONTRACT, **stage.outputs}


def _check_outputs(stage: Stage, frames: Any, contracts: Mapping[str, Contract]) -> dict[str, pl.DataFrame]:
    if not isinstance(frames, Mapping):
        raise StageError(f"stage {stage.name!r} returned {type(frames).__name__}; return a dict of polars DataFrames")
    undeclared = sorted(set(frames) - set(contracts))
    missing = sorted(set(stage.outputs) - set(frames) - {REJECTED})
    if undeclared or missing:
        raise StageError(
            f"stage {stage.name!r} returned outputs {sorted(frames)} but declares {sorted(stage.outputs)}"
            + (f"; undeclared: {undeclared}" if undeclared else "")
            + (f"; missing: {missing}" if missing else "")
        )
    out = {}
    for name, frame in frames.items():
        if isinstance(frame, pl.LazyFrame):
            frame = frame.collect()
        if not isinstance(frame, pl.DataFrame):
            raise StageError(f"stage {stage.name!r} output {name!r} is a {type(frame).__name__}, not a polars DataFrame")
        out[name] = frame
    if REJECTED in stage.outputs and REJECTED not in out:  # an optional output: publish it empty, with its columns
        out[REJECTED] = pl.DataFrame(schema=dict(stage.outputs[REJECTED].columns))
    return out


def _check_input_names(stage: Stage, params: Params, input_keys: Mapping[str, str]) -> None:
    """Keys for every input these params read, and for no stage it does not declare (an unread optional input's
    key may be given or not)."""
    needed = set(stage.reads(params))
    if not needed <= set(input_keys) <= set(stage.inputs):
        raise StageError(
            f"stage {stage.name!r} reads inputs {sorted(needed)}; got keys for {sorted(input_keys)}"
        )


def _resolve_inputs(store: ArtifactStore, stage: Stage, read_keys: Mapping[str, str]) -> dict[str, PublishedArtifact]:
    """The published input artifacts; UpstreamMissing names the first one that is not published."""
    inputs = {}
    for name, key in read_keys.items():
        artifact = store.get(name, key)
        if artifact is None:
            raise UpstreamMissing(stage.name, name, key, store.quarantined(name, key))
        inputs[name] = artifact
    return inputs


def execute_stage(
    store: ArtifactStore,
    catalog: Catalog | None,
    stage: Stage,
    raw_params: Mapping[str, Any] | Params | None,
    input_keys: Mapping[str, str],
    partition: str,
    *,
    force: bool = False,
    flow_run_id: str | None = None,
) -> StageRun:
    """Return the published artifact of (stage, params, inputs, partition), running the stage only on a cache
    miss (or ``force``). A critical contract failure quarantines the outputs and raises ContractViolation.

    ``catalog`` None writes manifests only: a Dask worker leaves the catalog to the flow driver, which reconciles
    the rows of what it planned (one DuckDB writer per data root, data_contracts/catalog.py)."""
    params = raw_params if isinstance(raw_params, stage.params) else stage.parse_params(raw_params)  # type: ignore[arg-type]
    _check_input_names(stage, params, input_keys)
    key = store.artifact_key(stage, params, input_keys, partition)
    # A hit stands even if an input was removed since: the key already pins which inputs made it.
    if not force and (hit := store.get(stage.name, key)) is not None:
        if catalog is not None:
            catalog.record(hit.manifest, "published")  # idempotent; heals a catalog rebuilt without it
        return StageRun.from_artifact(hit, cached=True)
    inputs = _resolve_inputs(store, stage, stage.read_keys(params, input_keys))
    scratch = store.scratch(stage.name, key) if stage.directory is not None else None
    try:
        return _run_gate_publish(store, catalog, stage, params, key, inputs, input_keys, partition, force,
                                 flow_run_id, scratch)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _run_gate_publish(
    store: ArtifactStore,
    catalog: Catalog | None,
    stage: Stage,
    params: Params,
    key: str,
    inputs: Mapping[str, PublishedArtifact],
    input_keys: Mapping[str, str],
    partition: str,
    force: bool,
    flow_run_id: str | None,
    scratch: Path | None,
) -> StageRun:
    contracts = output_contracts(stage)
    directory = None
    start = time.perf_counter()
    if scratch is None:
        returned = stage.run(inputs, params, partition)
    else:  # a model or index stage writes its directory into the scratch space
        directory = scratch / stage.directory.name
        directory.mkdir()
        returned = stage.run(inputs, params, partition, directory)
    frames = _check_outputs(stage, returned, contracts)
    run_s = time.perf_counter() - start

    reports = {name: validate(stage.name, name, frame, contracts[name], partition) for name, frame in frames.items()}
    if directory is not None:
        reports[stage.directory.name] = validate_directory(stage.name, directory, stage.directory, partition)
    gate_s = time.perf_counter() - start - run_s

    manifest = store.manifest(
        stage, key, partition=partition, params=params, input_keys=input_keys,
        timings={"run_s": run_s, "gate_s": gate_s}, flow_run_id=flow_run_id,
        contract={name: report.summary() for name, report in reports.items()},
    )
    if not all(report.passed for report in reports.values()):
        quarantine = store.quarantine(manifest, frames, reports, directory=directory)
        if catalog is not None and (written := store.quarantined_manifest(stage.name, key)) is not None:
            catalog.record(written, "quarantined")
        raise ContractViolation(stage.name, partition, key, reports, quarantine)

    published = store.publish(manifest, frames, reports=reports, replace=force, directory=directory)
    store.remove_quarantine(stage.name, key)
    if catalog is not None:
        catalog.record(published.manifest, "published")
    publish_s = time.perf_counter() - start - run_s - gate_s
    # a concurrent writer of the same key that committed first: its copy stands, this run published nothing
    won = published.manifest.get("publish_id") == manifest["publish_id"]
    return StageRun.from_artifact(
        published, cached=not won, timings={"run_s": run_s, "gate_s": gate_s, "publish_s": publish_s} if won else {}
    )


Lookup = Callable[[str], Stage]
"""Finds a stage by name: ``get_stage`` (already registered) or ``flows.registry.stage_named`` (imports its module)."""


def _reads(declared: Stage, params_by_stage: Mapping[str, Mapping[str, Any]] | None) -> tuple[str, ...]:
    """The inputs the stage reads with its raw params (without params: every input it declares)."""
    if params_by_stage is None or not declared.optional_inputs:
        return declared.inputs
    return declared.reads(declared.parse_params(params_by_stage.get(declared.name, {})))


def stage_graph(targets: Sequence[str], lookup: Lookup = get_stage,
                params_by_stage: Mapping[str, Mapping[str, Any]] | None = None) -> nx.DiGraph:
    """The upstream closure of ``targets``, with an edge from each input to the stage that reads it (an unrelated
    misdeclared stage does not block a run); with raw params, an optional input they do not ask for is left out."""
    graph = nx.DiGraph()
    todo, seen = list(targets), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        graph.add_node(name)
        for input_name in _reads(lookup(name), params_by_stage):
            try:
                lookup(input_name)
            except StageError:
                raise StageError(f"stage {name!r} reads {input_name!r}, which is not a registered stage; "
                                 f"known stages: {', '.join(sorted(STAGES))}") from None
            graph.add_edge(input_name, name)
            todo.append(input_name)
    return graph


def plan(targets: Sequence[str], lookup: Lookup = get_stage,
         params_by_stage: Mapping[str, Mapping[str, Any]] | None = None) -> list[Stage]:
    """The targets and everything upstream of them (that these raw params read), in a deterministic topological
    order."""
    graph = stage_graph(targets, lookup, params_by_stage)  # an unknown target raises StageError listing the known stages
    try:
        order = list(nx.lexicographical_topological_sort(graph))
    except nx.NetworkXUnfeasible:
        edges = nx.find_cycle(graph)
        cycle = " -> ".join([edge[0] for edge in edges] + [edges[0][0]])
        raise StageError(f"the stage graph has a cycle: {cycle}; a stage cannot depend on its own output") from None
    return [lookup(name) for name in order]


def planned_keys(order: Sequence[Stage], params_by_stage: Mapping[str, Mapping[str, Any]], partition: str
                 ) -> dict[str, str]:
    """The artifact key of every stage of a plan (inputs before their readers) with these raw params: what
    ``execute_stage`` would publish, or find published, computed without running anything."""
    keys: dict[str, str] = {}
    for declared in order:
        params = declared.parse_params(params_by_stage.get(declared.name, {}))
        keys[declared.name] = ArtifactStore.artifact_key(declared, params, {n: keys[n] for n in declared.reads(params)},
                                                         partition)
    return keys


def run_serially(
    store: ArtifactStore,
    catalog: Catalog,
    targets: Sequence[str],
    params_by_stage: Mapping[str, Mapping[str, Any]],
    partition: str,
    *,
    force: bool = False,
    progress: bool = True,
    flow_run_id: str | None = None,
) -> dict[str, StageRun]:
    """Run ``targets`` and their upstream closure serially in this process, without Prefect or Dask (a notebook,
    a test); ``force`` re-runs the targets only (upstream artifacts are reused when cached). The stages must be
    registered (their modules imported)."""
    unknown = sorted(set(params_by_stage) - set(STAGES))
    if unknown:
        raise StageError(f"params given for unknown stage(s) {unknown}; known stages: {', '.join(sorted(STAGES))}")
    order = plan(targets, params_by_stage=params_by_stage)
    runs: dict[str, StageRun] = {}

    from rich.progress import Progress

    with Progress(disable=not progress, transient=False) as bar:
        task = bar.add_task("run", total=len(order))
        for declared in order:
            bar.update(task, description=f"{declared.name} [{partition}]")
            runs[declared.name] = execute_stage(
                store, catalog, declared, params_by_stage.get(declared.name, {}),
                {name: runs[name].key for name in _reads(declared, params_by_stage)}, partition,
                force=force and declared.name in targets, flow_run_id=flow_run_id,
            )
            bar.advance(task)
    return runs

"""The Prefect side of the data DAG: one generic task that runs any Stage, the flows, and ``materialize``.

``run_stage`` wraps ``data_contracts.runner.execute_stage`` (key, cache, run, gate, publish or quarantine). The
flows plan the DAG (``flows/plan.py``: every stage's params validated before anything runs), then submit one task
per stage whose ``input_keys`` are the upstream stages' futures: Prefect makes the task wait for them and hands it
their StageRun records (keys and row counts, never frames). Independent stages run in parallel on Dask, and a
failed stage blocks exactly the stages downstream of it.

Room CLIs run stages "through the store" with :func:`materialize`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, TASK_SOURCE, CachePolicy
from prefect.futures import PrefectFuture, as_completed
from prefect.states import State

from data_contracts.catalog import Catalog
from data_contracts.data_docs import build_data_docs
from data_contracts.roots import data_root, open_store
from data_contracts.runner import ContractViolation, StageRun, execute_stage
from data_contracts.stage import StageError
from data_contracts.store import ArtifactStore, PublishedArtifact
from flows.figures import draw_figure, figure_markdown
from flows.plan import PlannedStage, plan_dag
from flows.profiles import Overrides, parse
from flows.registry import stage_named
from flows.runtime import DASK_ENV, Runtime, cluster_kwargs

# Transient failures (a flaky filesystem, a timeout) are retried; a contract violation or a bad stage is not:
# re-running a deterministic stage on the same inputs fails the same way.
TRANSIENT = (OSError, TimeoutError)
STAGE_RETRIES = 2


class StageFailed(RuntimeError):
    """A stage run failed in a way a retry cannot fix; the message names stage, partition and what failed.

    Carries only its message and whether the contract failed, so it pickles across Dask worker processes whatever
    the original exception held.
    """

    def __init__(self, message: str, contract_failed: bool = False) -> None:
        super().__init__(message, contract_failed)
        self.contract_failed = contract_failed

    def __str__(self) -> str:
        return str(self.args[0])


class PipelineFailed(RuntimeError):
    """At least one stage failed; ``summary`` has a row per planned stage (failed and blocked ones included)."""

    def __init__(self, message: str, summary: list[dict[str, Any]]) -> None:
        super().__init__(message, summary)
        self.summary = summary

    def __str__(self) -> str:
        return str(self.args[0])


# --- the generic task -----------------------------------------------------------------------------------------


def _keys(input_keys: Mapping[str, str | StageRun]) -> dict[str, str]:
    """Input artifact keys. An upstream future arrives resolved to that stage's StageRun, whose key is the one it
    actually published: right even when a worker's copy of a stage differs from the driver's."""
    return {name: value if isinstance(value, str) else value.key for name, value in input_keys.items()}


def _stage_key(stage_name: str, params_json: str, input_keys: Mapping[str, str], partition: str) -> str:
    stage = stage_named(stage_name)
    return ArtifactStore.artifact_key(stage, parse(stage_name, json.loads(params_json)), input_keys, partition)


@dataclass
class _ArtifactInputs(CachePolicy):
    """INPUTS + TASK_SOURCE over hashable inputs: upstream StageRuns count by their artifact keys, and the
    stage's own artifact key (which carries its version) is added; ``force`` disables the cache. A Prefect cache
    hit does not prove the files still exist (STACK.md), so the flow submits a stage whose artifact is missing with
    ``refresh_cache``: it runs, and its new result replaces the record."""

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any) -> str | None:
        if inputs.get("force"):
            return None
        keys = _keys(inputs["input_keys"])
        artifact = _stage_key(inputs["stage_name"], inputs["params_json"], keys, inputs["partition"])
        hashable = {**inputs, "input_keys": keys, "artifact_key": artifact}
        return (INPUTS + TASK_SOURCE).compute_key(task_ctx, hashable, flow_parameters, **kwargs)


def _transient(task: Any, task_run: Any, state: State) -> bool:
    return isinstance(state.result(raise_on_failure=False), TRANSIENT)


def _artifact_key(stage_name: str, partition: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{stage_name}-{partition}".lower()).strip("-")


def _report_run(store: ArtifactStore, run: StageRun) -> None:
    table = [
        {"output": name, "rows": rows, "contract": "passed" if run.contract.get(name, True) else "failed"}
        for name, rows in sorted(run.outputs.items())
    ]
    timings = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in run.timings.items()) or "cached"
    create_table_artifact(
        table=table,
        key=_artifact_key(run.stage, run.partition),
        description=f"**{run.stage}** `{run.partition}` key `{run.key}`: {run.bytes:,} bytes; {timings}",
    )
    figure = draw_figure(store, stage_named(run.stage), run.key)
    if figure is not None:
        create_markdown_artifact(
            markdown=figure_markdown(figure, f"{run.stage} ({run.partition})"),
            key=_artifact_key(f"{run.stage}-figure", run.partition),
        )


def _report_violation(exc: ContractViolation) -> None:
    table = [
        {"output": output, "expectation": failure.name, "unexpected": failure.unexpected_count, "message": failure.message}
        for output, report in sorted(exc.reports.items())
        for failure in report.failures("critical")
    ]
    create_table_artifact(
        table=table,
        key=_artifact_key(exc.stage, exc.partition),
        description=f"**{exc.stage}** `{exc.partition}` key `{exc.key}`: QUARANTINED at `{exc.quarantine_path}`",
    )


@task(
    task_run_name="{stage_name}/{partition}",
    cache_policy=_ArtifactInputs(),
    retries=STAGE_RETRIES,
    retry_delay_seconds=2,
    retry_condition_fn=_transient,
)
def run_stage(
    stage_name: str,
    params_json: str,
    input_keys: dict[str, str | StageRun],
    partition: str,
    data_dir: str,
    force: bool = False,
) -> StageRun:
    """Run one stage on one partition through the store and return what it published (or found cached).

    ``input_keys`` maps each input stage to its artifact key, or to that stage's future (which Prefect resolves to
    its StageRun once it completes, and which makes this task wait for it)."""
    from prefect.runtime import flow_run

    store = open_store(data_dir)
    try:
        # manifests only: the flow driver writes the catalog (one DuckDB writer per data root)
        run = execute_stage(
            store, None, stage_named(stage_name), json.loads(params_json), _keys(input_keys), partition,
            force=force, flow_run_id=flow_run.id,
        )
    except ContractViolation as exc:
        _report_violation(exc)
        raise StageFailed(str(exc), contract_failed=True) from None
    except TRANSIENT:
        raise
    except Exception as exc:  # noqa: BLE001 - StageError, UpstreamMissing, a stage's bug: re-raised as its message
        raise StageFailed(f"stage {stage_name!r} partition {partition!r}: {type(exc).__name__}: {exc}") from None
    _report_run(store, run)
    return run


# --- the DAG --------------------------------------------------------------------------------------------------

Listener = Callable[[dict[str, Any]], None]
_listener: ContextVar[Listener | None] = ContextVar("gymforge_stage_listener", default=None)


@contextlib.contextmanager
def on_stage_done(listener: Listener) -> Iterator[None]:
    """Call ``listener(summary_row)`` as each stage of a flow run in this process finishes (the CLI's progress)."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def _summary_row(stage: PlannedStage, partition: str, state: State, result: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"stage": stage.name, "partition": partition, "key": stage.key}
    if isinstance(result, StageRun):
        seconds = sum(result.timings.values())
        cached = result.cached or state.is_completed() and state.name == "Cached"
        return row | {
            "key": result.key,
            "status": "cached" if cached else "published",
            "rows": sum(result.outputs.values()),
            "outputs": result.outputs,
            "bytes": result.bytes,
            "contract": "passed" if all(result.contract.values()) else "failed",
            "seconds": round(0.0 if cached else seconds, 3),
            "error": "",
        }
    blocked = not state.is_final()
    return row | {
        "status": "blocked" if blocked else "failed",
        "rows": 0, "outputs": {}, "bytes": 0,
        "contract": "failed" if isinstance(result, StageFailed) and result.contract_failed else "-",
        "seconds": 0.0,
        "error": "an upstream stage failed" if blocked else str(result),
    }


def _run_dag(
    profile: str,
    partition: str,
    stages: Sequence[str] | None,
    force: bool,
    overrides: Overrides | None,
    data_dir: str | None,
) -> list[dict[str, Any]]:
    logger = get_run_logger()
    root = data_root(data_dir)
    store = open_store(root)
    resolved = store.clean_partial()  # finish what writers killed mid-write or mid-replace left behind
    if resolved:
        logger.info("resolved %d director%s left by killed runs", resolved, "y" if resolved == 1 else "ies")
    planned = plan_dag(stages, profile, partition, overrides=overrides, force=force)
    # A run killed between its rename and its catalog write left the catalog behind the disk; a cached Prefect
    # task never reaches the runner, so bring the rows of every planned artifact up to date here.
    Catalog(root).reconcile(store, [(stage.name, stage.key) for stage in planned])
    logger.info("plan for partition %r on profile %r: %s", partition, profile, " -> ".join(p.name for p in planned))

    futures: dict[str, PrefectFuture[StageRun]] = {}
    by_future: dict[PrefectFuture[StageRun], PlannedStage] = {}
    for stage in planned:
        missing = store.get(stage.name, stage.key) is None
        future = (run_stage.with_options(refresh_cache=True) if missing else run_stage).submit(
            stage.name, stage.params_json, {name: futures[name] for name in stage.inputs}, partition, str(root),
            stage.force,
        )
        futures[stage.name] = future
        by_future[future] = stage

    rows: dict[str, dict[str, Any]] = {}
    listener = _listener.get()
    for future in as_completed(list(futures.values())):
        stage = by_future[future]
        future.wait()  # sets the state the worker returned; the API's copy may lag behind it
        state = future.state
        # a task whose upstream failed is left un-run (Pending, "NotReady"): it has no result
        result = future.result(raise_on_failure=False) if state.is_final() else None
        rows[stage.name] = _summary_row(stage, partition, state, result)
        if listener is not None:
            listener(rows[stage.name])
    summary = [rows[stage.name] for stage in planned]
    # the driver records what its workers published or quarantined (keys as published, and as planned)
    Catalog(root).reconcile(store, sorted({(row["stage"], row["key"]) for row in summary}
                                          | {(stage.name, stage.key) for stage in planned}))
    logger.info("Data Docs: %s", build_data_docs(root))

    failed = [row for row in summary if row["status"] == "failed"]
    if failed:
        message = "\n".join(row["error"] for row in failed)
        if blocked := _blocked_by(planned, rows):
            message += "\n" + "\n".join(blocked)
        raise PipelineFailed(message, summary)
    return summary


def _blocked_by(planned: Sequence[PlannedStage], rows: Mapping[str, dict[str, Any]]) -> list[str]:
    """One line per failed stage that blocked others: "blocked by quarantined qa_seeds: qa_filtered, keychain"."""
    upstream: dict[str, set[str]] = {}
    for stage in planned:  # topological order: a stage's inputs are already resolved
        upstream[stage.name] = set(stage.inputs).union(*(upstream[name] for name in stage.inputs))
    lines = []
    for cause in (row for row in rows.values() if row["status"] == "failed"):
        blocked = [stage.name for stage in planned
                   if rows[stage.name]["status"] == "blocked" and cause["stage"] in upstream[stage.name]]
        if blocked:
            how = "quarantined" if cause["contract"] == "failed" else "failed"
            lines.append(f"blocked by {how} {cause['stage']}: {', '.join(blocked)}")
    return lines


def task_runner_from_env() -> Any:
    """Deployment runs (a worker process) attach to ``$GYMFORGE_DASK_ADDRESS`` when set, otherwise start a
    temporary local cluster; in-process callers pass their Runtime's runner with ``with_options``."""
    from prefect_dask import DaskTaskRunner

    if address := os.environ.get(DASK_ENV):
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(cluster_kwargs=cluster_kwargs())


def _refresh_run_name() -> str:
    from prefect.runtime import flow_run

    parameters = flow_run.parameters
    return f"data-refresh {Path(parameters['profile']).stem}/{parameters['partition']}"


@flow(name="data-refresh", flow_run_name=_refresh_run_name, task_runner=task_runner_from_env())
def data_refresh(
    profile: str = "tiny",
    partition: str = "default",
    stages: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, dict[str, Any]] | None = None,
    data_dir: str | None = None,
) -> list[dict[str, Any]]:
    """Materialize ``stages`` and everything upstream of them for one partition; returns a row per stage.

    Args:
        profile: tiny | small | default | full, or a path to a profile YAML.
        partition: the partition every stage runs on.
        stages: target stage names; none means every registered stage.
        force: re-run the targets even when cached (their upstream stays cached).
        overrides: {stage: {param: value}} applied on top of the profile.
        data_dir: data root; none means $GYMFORGE_DATA, else ./data.
    """
    return _run_dag(profile, partition, stages, force, overrides, data_dir)


@flow(name="backfill", flow_run_name="backfill {stage}/{partition}", task_runner=task_runner_from_env())
def backfill(
    stage: str,
    partition: str = "default",
    force: bool = False,
    profile: str = "tiny",
    data_dir: str | None = None,
) -> list[dict[str, Any]]:
    """One stage and its upstream on one partition: the unit ``gymforge backfill`` runs per partition.

    Args:
        stage: the stage to materialize.
        partition: the partition to run it on.
        force: re-run the stage even when cached.
        profile: tiny | small | default | full, or a path to a profile YAML.
        data_dir: data root; none means $GYMFORGE_DATA, else ./data.
    """
    return _run_dag(profile, partition, [stage], force, None, data_dir)


def refresh(
    runtime: Runtime,
    *,
    profile: str = "tiny",
    partition: str = "default",
    stages: Sequence[str] | None = None,
    force: bool = False,
    overrides: Overrides | None = None,
) -> list[dict[str, Any]]:
    """Run ``data_refresh`` in this process on a started Runtime's Dask cluster."""
    plan_dag(stages, profile, partition, overrides=overrides)  # a user error fails here, before a flow run exists
    return data_refresh.with_options(task_runner=runtime.task_runner())(
        profile=profile,
        partition=partition,
        stages=list(stages) if stages else None,
        force=force,
        overrides={name: dict(section) for name, section in (overrides or {}).items()} or None,
        data_dir=str(runtime.root),
    )


def materialize(
    targets: Sequence[str],
    *,
    profile: str = "tiny",
    overrides: Overrides | None = None,
    partition: str = "default",
    data_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
    runtime: Runtime | None = None,
) -> dict[str, PublishedArtifact]:
    """Publish ``targets`` (and everything upstream) through the store and return stage name -> artifact.

    The call room CLIs use: it runs the ``data_refresh`` flow (recorded in Prefect, executed on Dask), starting a
    Runtime for the call unless one is given. Cached artifacts are reused; ``force`` re-runs the targets only.
    ``overrides`` ({stage: {param: value}}) apply on top of the profile. Raises ``PipelineFailed`` (message
    naming stage, partition and expectation) when a stage fails; ``StageError`` for an unknown stage or bad params.
    """
    if not targets:
        raise StageError("materialize needs at least one target stage")
    with contextlib.ExitStack() as stack:
        rt = runtime or stack.enter_context(Runtime(data_dir))
        summary = refresh(rt, profile=profile, partition=partition, stages=targets, force=force, overrides=overrides)
    store = open_store(rt.root)
    published = {row["stage"]: store.get(row["stage"], row["key"]) for row in summary}
    missing = sorted(name for name, artifact in published.items() if artifact is None)
    if missing:  # the flow reported success, so this means files were removed while it ran
        raise StageError(f"artifacts of {', '.join(missing)} disappeared from {rt.root} right after the run")
    return {name: artifact for name, artifact in published.items() if artifact is not None}

"""Backfills: one ``backfill`` flow run per partition, created through ``run_deployment`` (DESIGN.md section 4).

Each run carries an idempotency key (stage, partition, force, profile, code version) and the tag ``backfill``: the
server returns the existing run for a key it has seen, so re-running the same backfill creates no new runs, and
(stages being deterministic) no new catalog rows.

Two ways to execute the runs:
- deployed (default): the ``backfill`` deployment of ``prefect.yaml`` must exist (``prefect --no-prompt deploy
  --all``) and a worker must poll its pool (``prefect worker start --pool cpu``); the command returns once the runs
  are created.
- ``serve``: the flow is served from this process for the duration of the command (a Prefect ``Runner`` under the
  deployment name ``backfill-local``, so the deployed one is left untouched); the command waits for every run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from data_contracts.store import code_version

DEPLOYMENT = "backfill/backfill"
LOCAL_DEPLOYMENT = "backfill-local"
TAG = "backfill"


class BackfillError(RuntimeError):
    """The backfill cannot start (no deployment to run); the message says what to run first."""


@dataclass(frozen=True)
class BackfillRun:
    partition: str
    flow_run_id: str
    state: str


def idempotency_key(stage: str, partition: str, force: bool, profile: str) -> str:
    version = code_version()
    code = f"{version['git_sha']}{'+dirty' if version['dirty'] else ''}"
    return f"backfill/{stage}/{partition}/force={force}/profile={profile}/{code}"


async def _deployment_exists(name: str) -> bool:
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        try:
            await client.read_deployment_by_name(name)
        except ObjectNotFound:
            return False
    return True


async def _backfill(
    stage: str, partitions: Sequence[str], force: bool, profile: str, serve: bool, data_dir: str | None
) -> list[BackfillRun]:
    from prefect import get_client
    from prefect.deployments.flow_runs import arun_deployment
    from prefect.runner import Runner

    from flows.dag import backfill, task_runner_from_env

    runner = None
    if serve:
        runner = Runner(name="gymforge-backfill", pause_on_shutdown=False)
        # The served flow object is shipped to the run processes as is: give it this runtime's Dask cluster, which
        # may have started after the module (and its import-time default) was loaded.
        await runner.aadd_flow(backfill.with_options(task_runner=task_runner_from_env()), name=LOCAL_DEPLOYMENT)
        name = f"backfill/{LOCAL_DEPLOYMENT}"
    elif await _deployment_exists(DEPLOYMENT):
        name = DEPLOYMENT
    else:
        raise BackfillError(
            f"deployment {DEPLOYMENT!r} does not exist on this Prefect server: run `prefect --no-prompt deploy --all` "
            "and start a worker (`prefect worker start --pool cpu`), or pass --serve to run the partitions here"
        )
    parameters = {"stage": stage, "force": force, "profile": profile}
    if data_dir is not None:
        parameters["data_dir"] = data_dir
    runs = [
        await arun_deployment(
            name,
            parameters={**parameters, "partition": partition},
            timeout=0,
            idempotency_key=idempotency_key(stage, partition, force, profile),
            tags=[TAG],
            as_subflow=False,
        )
        for partition in partitions
    ]
    if runner is not None:
        await runner.start(run_once=True)  # executes every scheduled run of the served deployment, then returns
    async with get_client() as client:
        states = [await client.read_flow_run(run.id) for run in runs]
    return [
        BackfillRun(partition, str(run.id), run.state.name if run.state else "unknown")
        for partition, run in zip(partitions, states, strict=True)
    ]


def run_backfill(
    stage: str,
    partitions: Sequence[str],
    *,
    force: bool = False,
    profile: str = "tiny",
    serve: bool = False,
    data_dir: str | None = None,
) -> list[BackfillRun]:
    """Create (or find, by idempotency key) one ``backfill`` flow run per partition, and with ``serve`` execute
    them here. Needs ``PREFECT_API_URL`` (a started ``Runtime``); with ``serve`` also ``GYMFORGE_DASK_ADDRESS``
    so the runs share its Dask cluster."""
    if not partitions:
        raise BackfillError("name at least one partition, e.g. --partitions p0,p1")
    return asyncio.run(_backfill(stage, list(partitions), force, profile, serve, data_dir))

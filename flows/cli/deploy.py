"""`gymforge deploy` and `gymforge worker`: the deployments of ``prefect.yaml`` and the worker that runs them, on the
data root's Prefect server.

A plain ``prefect deploy`` talks to whatever ``PREFECT_API_URL`` says, and unset that is an ephemeral profile no
worker ever sees. These commands take a lease on the data root's server (or attach with ``--prefect-api-url``). The
worker starts one Dask cluster and hands its address to every run it picks up (``GYMFORGE_DASK_ADDRESS``), so two
backfill runs share two Dask workers instead of starting a 2-worker cluster each on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

POOL = "cpu"  # the work pool of prefect.yaml's data deployments
GPU_POOL = "gpu"  # the work pool of its training deployments: one run at a time (DESIGN.md section 4)
POOLS = (POOL, GPU_POOL)


def project_dir() -> Path:
    """The checkout holding ``prefect.yaml``: deployments run from it (its pull step sets the working directory)."""
    here = Path(__file__).resolve().parents[2]
    if not (here / "prefect.yaml").is_file():
        raise typer.BadParameter(f"no prefect.yaml in {here}: deploy from a checkout of gymforge")
    return here


async def _ensure_pool(limit: int | None, name: str = POOL) -> None:
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectAlreadyExists

    async with get_client() as client:
        try:
            await client.create_work_pool(WorkPoolCreate(name=name, type="process", concurrency_limit=limit))
        except ObjectAlreadyExists:
            await client.update_work_pool(name, WorkPoolUpdate(concurrency_limit=limit))


async def _schedules(pause: bool) -> list[tuple[str, str, bool]]:
    """(deployment, schedule, on) of every deployment with a schedule; ``pause`` turns each of them off."""
    from prefect import get_client

    found = []
    async with get_client() as client:
        for deployment in await client.read_deployments():
            for schedule in deployment.schedules:
                if pause and schedule.active:
                    await client.update_deployment_schedule(deployment.id, schedule.id, active=False)
                cron = getattr(schedule.schedule, "cron", None)
                timezone = getattr(schedule.schedule, "timezone", None) or "UTC"
                what = f"cron {cron!r} ({timezone})" if cron else str(schedule.schedule)
                found.append((deployment.name, what, schedule.active and not pause))
    return sorted(found)


class Stopped(Exception):
    """SIGINT or SIGTERM reached `gymforge worker`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def register(app: typer.Typer) -> None:
    @app.command()
    def deploy(
        limit: Annotated[int | None, typer.Option(help="Flow runs of the `cpu` pool at once (default: no limit; "
                                                      "runs share the worker's Dask cluster).")] = None,
        paused: Annotated[bool, typer.Option("--paused", help="Create the deployments with every schedule off "
                                                              "(turn one on in the UI or with `prefect deployment "
                                                              "schedule resume`).")] = False,
    ) -> None:
        """Create the `cpu` and `gpu` work pools (the `gpu` pool runs one flow at a time) and every deployment of
        prefect.yaml on the data root's Prefect server, and say which schedules that turned on; then start
        `gymforge worker` (and `gymforge worker --pool gpu`) to run them."""
        from flows.runtime import Runtime

        project = project_dir()
        with Runtime(dask=False) as rt:  # exports PREFECT_API_URL to this process and the deploy below
            asyncio.run(_ensure_pool(limit))
            asyncio.run(_ensure_pool(1, GPU_POOL))
            done = subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"], cwd=project,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise typer.BadParameter(f"`prefect deploy --all` failed in {project}:\n{tail}")
            schedules = asyncio.run(_schedules(pause=paused))
            typer.echo(f"deployed prefect.yaml to {rt.ui_url}/deployments; run them with `gymforge worker`")
            for deployment, schedule, on in schedules:
                typer.echo(f"schedule of {deployment}: {schedule}, " + (
                    "ON: its runs start on time once a worker polls the pool" if on else
                    "paused (--paused): nothing runs on it until it is turned on"))

    @app.command()
    def worker(
        limit: Annotated[int | None, typer.Option(help="Flow runs this worker runs at once.")] = None,
        pool: Annotated[str, typer.Option(help="cpu (data refreshes, backfills) or gpu (training runs).")] = POOL,
    ) -> None:
        """Run a pool's flow runs until Ctrl-C (or SIGTERM) on the data root's Prefect server: the `cpu` pool's on
        one Dask cluster shared by every run, the `gpu` pool's (training) in the worker's own processes, one at a
        time."""
        from flows.runtime import Runtime

        if pool not in POOLS:
            raise typer.BadParameter(f"{pool!r}: choose one of {', '.join(POOLS)}", param_hint="--pool")
        project = project_dir()
        command = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"]
        if limit is not None:
            command += ["--limit", str(limit)]
        stopped: Stopped | None = None
        # the lease keeps the server up; a cpu worker's cluster serves every run (env inherited), a gpu one has none
        with Runtime(dask=pool == POOL) as rt:
            where = f"Dask scheduler {rt.dask_address}" if pool == POOL else "training in the worker's processes"
            typer.echo(f"worker of pool {pool!r} at {rt.ui_url}; {where}")
            # Both signals stop it, also started in the background, where a shell leaves SIGINT ignored (and
            # Python then never raises KeyboardInterrupt): set here, whatever they were, until the Runtime closes.
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, _raise_stopped)
            process: subprocess.Popen[bytes] | None = None
            try:
                process = subprocess.Popen(command, cwd=project, start_new_session=True)  # signals come from here
                process.wait()
            except Stopped as signal_:
                stopped = signal_
                typer.echo(f"{signal_}: stopping the worker", err=True)
                if process is not None:
                    _stop(process)
        if stopped is not None:
            raise typer.Exit(128 + stopped.signum)
        if process is not None and process.returncode not in (0, -15, 130, 143):
            raise typer.Exit(process.returncode)


def _stop(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM the Prefect worker (it cancels nothing: its runs are its own processes), then SIGKILL after
    ``grace_s``; further signals while it stops are ignored, so the data root's server and cluster stop cleanly."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

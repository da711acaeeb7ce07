"""`gymforge deploy` and `gymforge worker`: the deployments of ``prefect.yaml`` and the worker that runs them, on the
data root's Prefect server.

A plain ``prefect deploy`` talks to whatever ``PREFECT_API_URL`` says, and unset that is an ephemeral profile no
worker ever sees. These commands take a lease on the data root's server (or attach with ``--prefect-api-url``). The
worker starts one Dask cluster and hands its address to every run it picks up (``GYMFORGE_DASK_ADDRESS``), so two
backfill runs share two Dask workers instead of starting a 2-worker cluster each on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

POOL = "cpu"  # the work pool of prefect.yaml's data deployments
GPU_POOL = "gpu"  # the work pool of its training deployments: one run at a time (DESIGN.md section 4)
POOLS = (POOL, GPU_POOL)


def project_dir() -> Path:
    """The checkout holding ``prefect.yaml``: deployments run from it (its pull step sets the working directory)."""
    here = Path(__file__).resolve().parents[1]
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


def register(app: typer.Typer) -> None:
    @app.command()
    def deploy(
        limit: Annotated[int | None, typer.Option(help="Flow runs of the `cpu` pool at once (default: no limit; "
                                                      "runs share the worker's Dask cluster).")] = None,
    ) -> None:
        """Create the `cpu` and `gpu` work pools (the `gpu` pool runs one flow at a time) and every deployment of
        prefect.yaml on the data root's Prefect server; then start `gymforge worker` (and `gymforge worker --pool
        gpu`) to run them."""
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
            typer.echo(f"deployed prefect.yaml to {rt.ui_url}/deployments; run them with `gymforge worker`")

    @app.command()
    def worker(
        limit: Annotated[int | None, typer.Option(help="Flow runs this worker runs at once.")] = None,
        pool: Annotated[str, typer.Option(help="cpu (data refreshes, backfills) or gpu (training runs).")] = POOL,
    ) -> None:
        """Run a pool's flow runs until Ctrl-C on the data root's Prefect server: the `cpu` pool's on one Dask
        cluster shared by every run, the `gpu` pool's (training) in the worker's own processes, one at a time."""
        from flows.runtime import Runtime

        if pool not in POOLS:
            raise typer.BadParameter(f"{pool!r}: choose one of {', '.join(POOLS)}", param_hint="--pool")
        project = project_dir()
        command = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"]
        if limit is not None:
            command += ["--limit", str(limit)]
        # the lease keeps the server up; a cpu worker's cluster serves every run (env inherited), a gpu one has none
        with Runtime(dask=pool == POOL) as rt:
            where = f"Dask scheduler {rt.dask_address}" if pool == POOL else "training in the worker's processes"
            typer.echo(f"worker of pool {pool!r} at {rt.ui_url}; {where}")
            process = subprocess.Popen(command, cwd=project)
            try:
                process.wait()
            except KeyboardInterrupt:
                process.terminate()
                process.wait(timeout=30)
        if process.returncode not in (0, -15, 130, 143):
            raise typer.Exit(process.returncode)

"""Deployments run by workers, as a data engineer runs them: with Prefect's own commands (the deploy steps of
docs/scale-out.md, word for word) and with `gymforge deploy` / `gymforge worker` (the module's ``deployed``
fixture), whose backfill runs share the worker's one Dask cluster. Either way both runs complete and the catalog holds
their artifacts. The `train-sft` deployment runs on a `gpu` pool worker, one run at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sft_fixtures import MICRO_SFT, training_root

from data_contracts.catalog import Catalog

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GYMFORGE = str(Path(sys.executable).parent / "gymforge")
PREFECT = str(Path(sys.executable).parent / "prefect")


@dataclass(frozen=True)
class Deployed:
    """A data root whose Prefect server a ``gymforge worker`` (the ``cpu`` pool, with its Dask cluster) holds up,
    with the project's deployments on it (``gymforge deploy``)."""

    env: dict[str, str]  # of a command on this data root, attached to nothing else
    dask_address: str
    deploy: subprocess.CompletedProcess[str]  # what `gymforge deploy` said


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """One server, worker and set of deployments for this module's tests (a server, a cluster and a deploy take
    about 30 s on 2 cores); module-scoped, so they stop when the last of those tests ends."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")}
    env["GYMFORGE_DATA"] = str(tmp_path_factory.mktemp("deployed") / "data")
    worker = subprocess.Popen([GYMFORGE, "worker"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        assert worker.stdout is not None
        banner = worker.stdout.readline()  # "worker of pool 'cpu' at URL; Dask scheduler ADDRESS"
        address = banner.split("Dask scheduler")[-1].strip()
        assert address.startswith("tcp://"), banner
        deploy = subprocess.run([GYMFORGE, "deploy"], env=env, capture_output=True, text=True, timeout=300,
                                check=False)
        assert deploy.returncode == 0, deploy.stdout + deploy.stderr
        yield Deployed(env, address, deploy)
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def _transitions(address: str) -> int:
    """Task state transitions the scheduler at ``address`` has made: it grows only when tasks run there."""
    from distributed import Client

    with Client(address, timeout=30) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


def test_backfill_runs_share_the_workers_cluster(deployed) -> None:
    assert "schedule of data-refresh: cron '0 2 * * *' (UTC), ON" in deployed.deploy.stdout  # it says what it turned on
    before = _transitions(deployed.dask_address)

    backfill = subprocess.run([GYMFORGE, "backfill", "--stage", "test_double_square", "--partitions", "w0,w1"],
                              env=deployed.env, capture_output=True, text=True, timeout=300, check=False)
    assert backfill.returncode == 0, backfill.stdout + backfill.stderr
    states = _wait_for_runs(deployed.env, ["backfill test_double_square/w0", "backfill test_double_square/w1"])
    assert states == ["Completed", "Completed"]
    # three stage tasks per partition ran on the worker's cluster (each through several states), not on clusters of
    # their own
    assert _transitions(deployed.dask_address) - before >= 6 * 3
    _assert_catalog_holds(Path(deployed.env["GYMFORGE_DATA"]), ["w0", "w1"])


def test_a_background_worker_stops_on_sigint_and_sigterm_and_deploy_paused_turns_no_schedule_on(tmp_path) -> None:
    """Started as a shell's `gymforge worker &` starts it (SIGINT ignored), the worker still stops on SIGINT and on
    SIGTERM: its Prefect worker process exits. One worker per signal, both on one data root, started side by side:
    they share its server, which outlives the first to stop and stops with the second (its lease was the last).
    Slow (about 25 s on 2 cores) by its subject: two workers start, and their server starts and stops."""
    import psutil

    from flows.prefect_server import ServerHome

    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")}
    env["GYMFORGE_DATA"] = str(tmp_path / "data")
    server = ServerHome(Path(env["GYMFORGE_DATA"]))
    workers = {signum: subprocess.Popen([GYMFORGE, "worker", "--pool", "gpu"], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        preexec_fn=_as_a_background_job)  # noqa: PLW1509 - it execs at once
               for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        for worker in workers.values():
            assert worker.stdout is not None and "worker of pool 'gpu'" in worker.stdout.readline()
        deployed = subprocess.run([GYMFORGE, "deploy", "--paused"], env=env, capture_output=True, text=True,
                                  timeout=300, check=False)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert "schedule of data-refresh: cron '0 2 * * *' (UTC), paused (--paused)" in deployed.stdout
        assert _data_refresh_schedule_active(env) is False
        for signum, worker in workers.items():
            prefect_worker = _child_named(worker.pid, "worker start")
            worker.send_signal(signum)
            assert worker.wait(timeout=60) == 128 + signum
            assert "Traceback" not in worker.stderr.read()
            assert not psutil.pid_exists(prefect_worker) or psutil.Process(prefect_worker).status() == "zombie"
            if signum == signal.SIGINT:
                # the other worker holds the server: it stays (its guardian looks twice a second)
                time.sleep(1.5)
                assert server.live_record() is not None, "the server stopped while the other worker held it"
        deadline = time.monotonic() + 30
        while server.live_record() is not None:
            assert time.monotonic() < deadline, "the data root's server is still up after both workers stopped"
            time.sleep(0.5)
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def _as_a_background_job() -> None:
    """What a non-interactive shell's `&` does to a command: SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _child_named(pid: int, part: str, timeout_s: float = 60) -> int:
    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if part in " ".join(child.cmdline()):
                    return child.pid
            except psutil.NoSuchProcess:
                continue
        assert time.monotonic() < deadline, f"no child process running {part!r}"
        time.sleep(0.2)


def _data_refresh_schedule_active(env: dict[str, str]) -> bool:
    import httpx

    from flows.prefect_server import ServerHome

    api_url = ServerHome(Path(env["GYMFORGE_DATA"])).live_record()["api_url"]
    [deployment] = httpx.post(f"{api_url}/deployments/filter", json={"deployments": {"name": {"any_": [
        "data-refresh"]}}}, timeout=30).json()
    return any(schedule["active"] for schedule in deployment["schedules"])


def test_prefect_deploy_and_prefect_worker_run_the_backfill(deployed, tmp_path: Path) -> None:
    """The steps of docs/scale-out.md: the data root's server (`gymforge ui --detach`), the `cpu` and `gpu` process
    pools, `prefect deploy --all`, `prefect worker start --pool cpu` on a machine whose environment names the data
    root and the Dask scheduler (the session's ``deployed`` worker's: its tasks run there), then `gymforge backfill`
    without --serve. Slow (30-40 s on 2 cores) by its subject: the documented steps start their own server, pools
    and Prefect worker, and each run is a new Python process."""
    project = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")}
    env["GYMFORGE_DATA"] = str(tmp_path / "data")
    env["GYMFORGE_DASK_ADDRESS"] = deployed.dask_address
    before = _transitions(deployed.dask_address)
    ui = subprocess.run([GYMFORGE, "ui", "--detach"], env=env, capture_output=True, text=True, timeout=300, check=True)
    env["PREFECT_API_URL"] = ui.stdout.split("Prefect UI:")[1].split()[0] + "/api"
    worker = None
    try:
        for command in (["work-pool", "create", "cpu", "--type", "process"],
                        ["work-pool", "create", "gpu", "--type", "process"],
                        ["work-pool", "set-concurrency-limit", "gpu", "1"],
                        ["--no-prompt", "deploy", "--all"]):
            done = subprocess.run([PREFECT, *command], env=env, cwd=project, capture_output=True, text=True,
                                  timeout=300, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "cpu"], env=env, cwd=project,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        backfill = subprocess.run([GYMFORGE, "backfill", "--stage", "test_double_square", "--partitions", "d0,d1"],
                                  env=env, capture_output=True, text=True, timeout=300, check=False)
        assert backfill.returncode == 0, backfill.stdout + backfill.stderr
        states = _wait_for_runs(env, ["backfill test_double_square/d0", "backfill test_double_square/d1"])
        assert states == ["Completed", "Completed"]
        assert _transitions(deployed.dask_address) - before >= 6 * 3  # the stage tasks ran on the named scheduler
        listed = subprocess.run([GYMFORGE, "artifacts", "ls", "--stage", "test_double_square"], env=env,
                                capture_output=True, text=True, timeout=120, check=True)
        assert "d0" in listed.stdout and "d1" in listed.stdout
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=60)
        subprocess.run([GYMFORGE, "ui", "--stop"], env=env, capture_output=True, timeout=120, check=False)
    _assert_catalog_holds(Path(env["GYMFORGE_DATA"]), ["d0", "d1"])


def _assert_catalog_holds(root: Path, partitions: list[str]) -> None:
    """Every stage of both partitions is in the catalog, recorded by the run that published it."""
    entries = Catalog(root).entries()
    assert sorted((entry.partition, entry.stage) for entry in entries) == sorted(
        (p, s) for p in partitions for s in ("test_double_other", "test_double_source", "test_double_square"))
    assert all(entry.flow_run_id is not None for entry in entries)


def _wait_for_runs(env: dict[str, str], names: list[str], timeout_s: float = 300) -> list[str]:
    from flows.prefect_server import ServerHome

    api_url = ServerHome(Path(env["GYMFORGE_DATA"])).live_record()["api_url"]
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        runs = httpx.post(f"{api_url}/flow_runs/filter", json={"flow_runs": {"name": {"any_": names}}},
                          timeout=30).json()
        states = [run["state"]["name"] for run in sorted(runs, key=lambda run: run["name"])]
        if len(states) == len(names) and all(state in ("Completed", "Failed", "Crashed") for state in states):
            return states
        assert time.monotonic() < deadline, f"runs not finished: {states}"
        time.sleep(0.5)


def test_the_train_sft_deployment_runs_on_a_gpu_pool_worker_one_at_a_time(deployed, tmp_path: Path) -> None:
    """On the module's deployments (``deployed``: a cpu pool worker holds their data root's server up); the run
    trains on another data root, named by its ``data_dir`` parameter. Slow (about 35 s on 2 cores) by its subject: a
    `gpu` pool worker starts, and each of the two deployment runs is a flow run process of its own (the first
    imports torch and transformers and trains)."""
    data, key, base = training_root(tmp_path)
    worker = subprocess.Popen([GYMFORGE, "worker", "--pool", "gpu"], env=deployed.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert worker.stdout is not None
        banner = worker.stdout.readline()  # it leases the data root's server while it runs
        assert "worker of pool 'gpu'" in banner, banner
        api_url = banner.split(" at ")[1].split(";")[0].rstrip("/") + "/api"
        state, pool, deployment = _run_deployment(api_url, {
            "data": [key], "base": str(base), "overrides": {**MICRO_SFT, "max_steps": 4}, "data_dir": str(data)})
        assert state == "Completed"
        assert pool["concurrency_limit"] == 1 and pool["type"] == "process"
        assert deployment["concurrency_limit"] == 1 and deployment["work_pool_name"] == "gpu"
        # a misspelt deployment parameter: the run fails with one clean line in its logs, no traceback
        state, _, deployment = _run_deployment(api_url, {"data": [key], "base": str(base), "data_dir": str(data),
                                                         "overrides": {"lerning_rate": 1e-3}})
        assert state == "Failed"
        errors = [log["message"] for log in deployment["logs"] if log["level"] >= 40]
        assert errors == ["sft: lerning_rate is not a field (did you mean learning_rate?)"], deployment["logs"]
        assert not any("Traceback" in log["message"] for log in deployment["logs"])
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    assert len(Catalog(data).entries(stage="sft", status="published")) >= 1


def _run_deployment(api_url: str, parameters: dict) -> tuple[str, dict, dict]:
    import asyncio

    from prefect import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        flow_run = run_deployment("train-sft/train-sft", parameters=parameters, timeout=0)

        async def wait() -> tuple[str, dict, dict]:
            async with get_client() as client:
                deadline = time.monotonic() + 600
                while True:
                    run = await client.read_flow_run(flow_run.id)
                    if run.state is not None and run.state.is_final():
                        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

                        pool = await client.read_work_pool("gpu")
                        deployment = await client.read_deployment(run.deployment_id)
                        # the run's process sends its logs in batches: wait for the engine's last line
                        logs = []
                        while not any(log.message.startswith("Finished in state") for log in logs):
                            assert time.monotonic() < deadline, f"the run's logs never ended: {logs}"
                            await asyncio.sleep(0.5)
                            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
                        return (run.state.name, pool.model_dump(mode="json"),
                                {"concurrency_limit": deployment.global_concurrency_limit.limit
                                 if deployment.global_concurrency_limit else None,
                                 "work_pool_name": deployment.work_pool_name,
                                 "logs": [log.model_dump() for log in logs]})
                    assert time.monotonic() < deadline, f"the run is still {run.state}"
                    await asyncio.sleep(0.5)

        return asyncio.run(wait())

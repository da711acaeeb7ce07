"""`gymforge deploy` and `gymforge worker` as a data engineer uses them: deployments land on the data root's
server, and backfill runs picked up together share the worker's one Dask cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GYMFORGE = str(Path(sys.executable).parent / "gymforge")


def _transitions(address: str) -> int:
    """Task state transitions the scheduler at ``address`` has made: it grows only when tasks run there."""
    from distributed import Client

    with Client(address, timeout=30) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


def test_backfill_runs_share_the_workers_cluster(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")}
    env["GYMFORGE_DATA"] = str(tmp_path / "data")
    worker = subprocess.Popen([GYMFORGE, "worker"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        assert worker.stdout is not None
        banner = worker.stdout.readline()  # "worker of pool 'cpu' at URL; Dask scheduler ADDRESS"
        address = banner.split("Dask scheduler")[-1].strip()
        assert address.startswith("tcp://"), banner
        deployed = subprocess.run([GYMFORGE, "deploy"], env=env, capture_output=True, text=True, timeout=300, check=False)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        before = _transitions(address)

        backfill = subprocess.run([GYMFORGE, "backfill", "--stage", "test_double_square", "--partitions", "w0,w1"],
                                  env=env, capture_output=True, text=True, timeout=300, check=False)
        assert backfill.returncode == 0, backfill.stdout + backfill.stderr
        states = _wait_for_runs(env, ["backfill test_double_square/w0", "backfill test_double_square/w1"])
        assert states == ["Completed", "Completed"]
        # three stage tasks per partition ran on the worker's cluster (each through several states), not on
        # clusters of their own
        assert _transitions(address) - before >= 6 * 3
    finally:
        worker.terminate()
        worker.wait(timeout=60)


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
        time.sleep(2)

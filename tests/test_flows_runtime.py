"""The Runtime: data root resolution, attaching starts nothing, a recorded server is reused, SIGTERM stops
everything the runtime started."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flows.runtime import PrefectServer, Runtime, RuntimeStartError, data_root


@pytest.mark.parametrize(("arg", "env", "expected"), [("given", "from-env", "given"), (None, "from-env", "from-env"),
                                                      (None, None, "data")])
def test_data_root_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arg, env, expected) -> None:
    monkeypatch.chdir(tmp_path)
    if env is None:
        monkeypatch.delenv("GYMFORGE_DATA", raising=False)
    else:
        monkeypatch.setenv("GYMFORGE_DATA", str(tmp_path / env))
    root = data_root(tmp_path / arg if arg else None)
    assert root == tmp_path / expected and root.is_dir()


@pytest.mark.integration
def test_attaching_starts_nothing(runtime) -> None:
    with Runtime(runtime.root, prefect_api_url=runtime.prefect_api_url, dask_address=runtime.dask_address) as rt:
        assert not rt.started_server and rt._cluster is None
        assert rt.task_runner().address == runtime.dask_address


@pytest.mark.integration
def test_a_recorded_server_is_reused(runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    assert PrefectServer(runtime.root).recorded() == runtime.prefect_api_url
    monkeypatch.delenv("PREFECT_API_URL")  # so only server.json can lead the new Runtime to the running server
    with Runtime(runtime.root, dask=False) as rt:
        assert rt.prefect_api_url == runtime.prefect_api_url and not rt.started_server


def test_attaching_to_a_dead_api_says_so(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeStartError, match="no Prefect API answers at http://127.0.0.1:9/api"),
        Runtime(tmp_path, prefect_api_url="http://127.0.0.1:9/api", dask=False),
    ):
        pass


RUNTIME_UNTIL_TERMINATED = textwrap.dedent(
    """
    import sys, time
    from flows.runtime import Runtime
    if __name__ == "__main__":
        with Runtime(sys.argv[1], n_workers=1) as rt:
            print(rt._cluster.scheduler_address, flush=True)
            time.sleep(600)
    """
)


@pytest.mark.integration
@pytest.mark.slow
def test_sigterm_stops_the_server_and_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("GYMFORGE_DASK_ADDRESS", raising=False)
    script = tmp_path / "hold.py"
    script.write_text(RUNTIME_UNTIL_TERMINATED)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "data")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("tcp://")
        record = tmp_path / "data" / "prefect" / "server.json"
        server_pid = json.loads(record.read_text())["pid"]
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False)
        children = [int(pid) for pid in workers.stdout.split()]
        assert server_pid in children and len(children) >= 2, "a server and a Dask nanny/worker were started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0
    finally:
        proc.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in children):
        time.sleep(0.2)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()], "every child process is gone"
    assert not record.exists(), "the server record is removed with its server"

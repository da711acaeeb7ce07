"""The Runtime: data root resolution, attaching starts nothing, a recorded server is reused, SIGTERM stops
everything the runtime started, and a server outlives no run that started it, however the run ended."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prefect.exceptions import TerminationSignal

from data_contracts.roots import DataRootError, data_root, writable_data_root
from flows.prefect_server import ServerHome, ServerLease, healthy, stop_server
from flows.runtime import Runtime, RuntimeStartError, _sigterm_raises


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


def test_the_runtimes_cluster_samples_itself_seldom_and_profiles_nothing(runtime) -> None:
    """QUIET_CLUSTER holds on the scheduler and on every worker (their nannies hand them the settings)."""
    from distributed import Client

    def intervals_ms(server) -> tuple[float, float]:
        return (server.periodic_callbacks["monitor"].callback_time, server.periodic_callbacks["tick"].callback_time)

    with Client(runtime.dask_address, set_as_default=False, timeout=30) as client:
        assert client.run_on_scheduler(lambda dask_scheduler: intervals_ms(dask_scheduler)) == (2000, 200)
        workers = client.run(lambda dask_worker: (*intervals_ms(dask_worker),
                                                  "profile" in dask_worker.periodic_callbacks))
    assert list(workers.values()) == [(2000, 200, False)] * 2


@pytest.mark.integration
def test_a_recorded_server_is_reused(runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ServerHome(runtime.root).live_record()["api_url"] == runtime.prefect_api_url
    monkeypatch.delenv("PREFECT_API_URL")  # so only server.json can lead the new Runtime to the running server
    with Runtime(runtime.root, dask=False) as rt:
        assert rt.prefect_api_url == runtime.prefect_api_url and not rt.started_server
    time.sleep(1.5)  # the guardian looks at the leases every 0.5 s
    assert healthy(runtime.prefect_api_url), "the inner runtime's release leaves the session's lease standing"


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
        guardian = json.loads(record.read_text())["pid"]
        descendants = psutil.Process(proc.pid).children(recursive=True)
        [server] = [p for p in descendants if "prefect server start" in " ".join(p.cmdline())]
        [forkserver] = [p for p in descendants
                        if p.ppid() == proc.pid and "multiprocessing.forkserver" in " ".join(p.cmdline())]
        assert server.ppid() == guardian
        assert forkserver.children(), "the Dask worker, forked from the Runtime's fork server"
        children = [p.pid for p in descendants]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0
    finally:
        proc.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in children):
        time.sleep(0.2)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()], "every child process is gone"
    assert not record.exists(), "the server record is removed with its server"


class SignalledInFinalizer:
    """Sends SIGTERM from its finalizer and runs on in it: the handler runs where Python ignores exceptions."""

    signum = signal.SIGTERM

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)
        for _ in range(1000):
            pass


def raise_termination_signal(signum: int, frame: object) -> None:
    raise TerminationSignal(signum)


@pytest.mark.parametrize("flow_running", [False, True])
def test_a_sigterm_lost_in_a_finalizer_is_delivered_again(capsys: pytest.CaptureFixture[str],
                                                          flow_running: bool) -> None:
    """While a flow runs, Prefect's own SIGTERM handler raises its TerminationSignal instead."""
    deadline, hook, handler = time.monotonic() + 5, sys.unraisablehook, signal.getsignal(signal.SIGTERM)
    with pytest.raises(TerminationSignal if flow_running else SystemExit) as stopped, _sigterm_raises():
        if flow_running:
            signal.signal(signal.SIGTERM, raise_termination_signal)
        SignalledInFinalizer()  # dropped at once
        while time.monotonic() < deadline:  # without the second delivery this runs to its end
            pass
    assert (stopped.value.signal == signal.SIGTERM if flow_running else stopped.value.code == 143)
    assert time.monotonic() < deadline
    assert "Exception ignored" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is handler and sys.unraisablehook is hook  # both given back


@pytest.mark.parametrize("setup", ["a file", "under a file"])
def test_a_data_root_that_is_no_directory_is_a_clear_error(tmp_path: Path, setup: str) -> None:
    (tmp_path / "f").write_text("x")
    target = tmp_path / "f" if setup == "a file" else tmp_path / "f" / "sub"
    with pytest.raises(DataRootError, match="not a directory"):
        data_root(target)


@pytest.mark.parametrize(("error", "message"), [(errno.EROFS, "read-only filesystem"), (errno.EACCES, "not writable")])
def test_a_read_only_data_root_is_a_clear_error_for_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          error: int, message: str) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(error, os.strerror(error), str(self))

    monkeypatch.setattr(Path, "touch", refuse)  # permission bits do not stop root, so the refusal is simulated
    with pytest.raises(DataRootError, match=message):
        writable_data_root(tmp_path)


def _processes(pids: list[int]) -> list[int]:
    """The pids that are still running (a zombie only waits for its parent to reap it)."""
    alive = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive


SERVER_UNTIL_KILLED = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from flows.prefect_server import ServerLease
    lease = ServerLease(Path(sys.argv[1]))
    print(lease.acquire(), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.integration
@pytest.mark.slow
def test_a_server_stops_when_its_run_is_killed_and_a_detached_one_stays(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    root = tmp_path / "data"
    script = tmp_path / "hold.py"
    script.write_text(SERVER_UNTIL_KILLED)
    run = subprocess.Popen([sys.executable, str(script), str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        api_url = run.stdout.readline().strip()
        guardian = json.loads((root / "prefect" / "server.json").read_text())["pid"]
        server = [int(p) for p in subprocess.run(["pgrep", "-P", str(guardian)], capture_output=True, text=True,
                                                 check=False).stdout.split()]
        assert server, "the guardian runs the server"
        # the UI this server serves talks to this server's API, not Prefect's default port 4200
        settings = httpx.get(api_url.removesuffix("/api") + "/ui-settings", timeout=10).json()
        assert settings["api_url"] == "/api"

        # a second process shares the server; the first one's kill -9 leaves it up for the second
        shared = ServerLease(root)
        assert shared.acquire() == api_url and not shared.started
        run.kill()
        run.wait(timeout=30)
        time.sleep(2)
        assert _processes([guardian, *server]), "the server stays while another process holds a lease"
        shared.release()
        deadline = time.monotonic() + 30
        while _processes([guardian, *server]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _processes([guardian, *server]), "the last holder gone, the server stops"
        assert ServerHome(root).live_record() is None
    finally:
        run.kill()

    kept = ServerLease(root, keep=True)
    kept.acquire()
    guardian = json.loads((root / "prefect" / "server.json").read_text())["pid"]
    time.sleep(2)
    assert _processes([guardian]), "a server left up on purpose (ui --detach) stays without a run"
    assert stop_server(root) and not _processes([guardian])


@pytest.fixture
def default_ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler, as a command starts with. The suite's process may hold another that an earlier
    test left (once in the whole suite, under load: no KeyboardInterrupt came at all)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("default_ctrl_c")
def test_a_ctrl_c_lost_in_a_finalizer_is_delivered_again() -> None:
    finalizer = SignalledInFinalizer()
    finalizer.signum = signal.SIGINT
    deadline = time.monotonic() + 5
    with pytest.raises(KeyboardInterrupt), _sigterm_raises():
        del finalizer
        while time.monotonic() < deadline:
            pass
    assert time.monotonic() < deadline


def test_servers_starting_side_by_side_migrate_one_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine's first servers (the suite's two session servers, a user's parallel runs) wait for one migration of
    the template database instead of each running their own."""
    import threading

    from flows import prefect_server

    migrations: list[str] = []

    def migrate_slowly(command: list[str], env: dict[str, str], **kwargs: object) -> None:  # test double of the CLI
        migrations.append(env[prefect_server.DATABASE_ENV])
        time.sleep(0.5)  # long enough for the other thread to find no template and queue on the lock
        Path(env[prefect_server.DATABASE_ENV].removeprefix("sqlite+aiosqlite:///")).write_bytes(b"migrated")

    monkeypatch.setenv("GYMFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prefect_server.subprocess, "run", migrate_slowly)
    templates: list[Path] = []
    threads = [threading.Thread(target=lambda: templates.append(prefect_server._migrated_template()))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(migrations) == 1
    assert templates[0] == templates[1] and templates[0].read_bytes() == b"migrated"

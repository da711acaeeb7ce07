"""The runtime gymforge needs: a Prefect server and a Dask cluster, started on demand or attached to.

``Runtime`` starts a Prefect server on a free loopback port (SQLite and ``PREFECT_HOME`` under the data root,
analytics off) and a Dask ``LocalCluster`` of single-threaded worker processes, and exports ``PREFECT_API_URL`` to
itself and to every process it starts. Without a real API every Dask worker would start its own ephemeral server on
one SQLite file: 28-40 s for a tiny flow and "database is locked" (STACK.md, Prefect). ``prefect_api_url`` and
``dask_address`` attach to running ones instead, and then nothing is started or stopped.

Everything a Runtime started is stopped when the ``with`` block ends, also on Ctrl-C and SIGTERM: the server runs
in its own process group, which is killed as a whole. A server started by a Runtime or by ``gymforge ui`` is
recorded in ``<data>/prefect/server.json`` so a later run reuses it (and its runs show in the UI already open).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Self

import httpx
import psutil

if TYPE_CHECKING:
    from prefect_dask import DaskTaskRunner

DATA_ENV = "GYMFORGE_DATA"
DASK_ENV = "GYMFORGE_DASK_ADDRESS"
API_ENV = "PREFECT_API_URL"
SERVER_START_TIMEOUT_S = 180.0  # STACK.md measures 5-13 s healthy; a shared 2-core box can be much slower

log = logging.getLogger(__name__)


class RuntimeStartError(RuntimeError):
    """The Prefect server or the Dask cluster could not be started; the message says where the log is."""


def data_root(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data root: ``data_dir``, else ``$GYMFORGE_DATA``, else ``./data`` (absolute, created)."""
    root = Path(data_dir or os.environ.get(DATA_ENV) or "data").expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{api_url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def prefect_env(root: Path) -> dict[str, str]:
    """Settings every Prefect process of this data root shares (server, flows, Dask workers, deployment runs)."""
    return {
        "PREFECT_HOME": str(root / "prefect"),
        # Telemetry lookups fail offline and contend for SQLite (STACK.md).
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        DATA_ENV: str(root),
    }


def cluster_kwargs(n_workers: int = 2) -> dict[str, Any]:
    """``LocalCluster`` settings of every cluster gymforge starts: single-threaded worker processes (stages are
    GIL-bound Python), and a dashboard on any free port (8787 may be taken, STACK.md)."""
    return {
        "n_workers": n_workers,
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": ":0",
        "silence_logs": logging.WARNING,
    }


def ui_url(api_url: str) -> str:
    return api_url.removesuffix("/").removesuffix("/api")


class PrefectServer:
    """A ``prefect server start`` subprocess on a free loopback port, in its own process group."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "prefect"
        self.record = self.home / "server.json"
        self.process: subprocess.Popen[bytes] | None = None
        self.api_url = ""

    def live_record(self) -> dict[str, Any] | None:
        """``{pid, api_url}`` of a live server recorded for this data root, or None (a stale record is removed)."""
        try:
            info = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        if psutil.pid_exists(int(info.get("pid", 0))) and _healthy(info["api_url"]):
            return info
        self.record.unlink(missing_ok=True)
        return None

    def recorded(self) -> str | None:
        """The API URL of a live server recorded for this data root, or None."""
        info = self.live_record()
        return None if info is None else str(info["api_url"])

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        self.api_url = f"http://127.0.0.1:{port}/api"
        env = {key: value for key, value in os.environ.items() if key != API_ENV}
        env |= prefect_env(self.root)
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{self.home / 'prefect.db'}"
        log_path = logs / "prefect-server.log"
        with log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # own process group: stopped as a whole, and Ctrl-C reaches us first
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not _healthy(self.api_url):
            if self.process.poll() is not None:
                raise RuntimeStartError(f"the Prefect server exited with code {self.process.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeStartError(f"the Prefect server was not healthy after {SERVER_START_TIMEOUT_S:.0f} s; see {log_path}")
            time.sleep(0.5)
        self.record.write_text(json.dumps({"pid": self.process.pid, "api_url": self.api_url}))
        return self.api_url

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        with contextlib.suppress(OSError, ValueError):
            if json.loads(self.record.read_text()).get("pid") == self.process.pid:
                self.record.unlink()
        self.process = None


def stop_recorded_server(data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Stop the server recorded for a data root (one left running by ``gymforge ui --detach``)."""
    server = PrefectServer(data_root(data_dir))
    info = server.live_record()
    if info is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(int(info["pid"]), signal.SIGTERM)
    server.record.unlink(missing_ok=True)
    return True


class Runtime:
    """Context manager: the Prefect API and Dask scheduler that flows of one data root run against.

    ``with Runtime(data_dir) as rt: data_refresh.with_options(task_runner=rt.task_runner())(...)``
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        prefect_api_url: str | None = None,
        dask_address: str | None = None,
        n_workers: int = 2,
        *,
        dask: bool = True,
    ) -> None:
        self.root = data_root(data_dir)
        self.prefect_api_url = prefect_api_url or os.environ.get(API_ENV) or None
        self.dask_address = dask_address or os.environ.get(DASK_ENV) or None
        self.n_workers = n_workers
        self.dask = dask  # False: only the Prefect API (``gymforge ui``, creating deployment runs)
        self._server: PrefectServer | None = None
        self._cluster: Any = None
        self._stack = contextlib.ExitStack()

    @property
    def started_server(self) -> bool:
        """True when this runtime started the Prefect server (and stops it on exit)."""
        return self._server is not None

    @property
    def ui_url(self) -> str:
        return ui_url(self.prefect_api_url or "")

    def task_runner(self) -> DaskTaskRunner:
        """A Dask task runner on this runtime's scheduler. Always by address: a ``cluster=`` object is dropped
        when Prefect copies the runner per flow run (STACK.md)."""
        from prefect_dask import DaskTaskRunner

        if self.dask_address is None:
            raise RuntimeError("this Runtime has no Dask cluster: start it as a context manager with dask=True")
        return DaskTaskRunner(address=self.dask_address)

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        self._stack.enter_context(_sigterm_raises())
        env = prefect_env(self.root)
        if self.prefect_api_url is None:
            server = PrefectServer(self.root)
            self.prefect_api_url = server.recorded()
            if self.prefect_api_url is None:
                self._stack.callback(server.stop)
                self.prefect_api_url = server.start()
                self._server = server
        elif not _healthy(self.prefect_api_url, timeout=10):
            raise RuntimeStartError(
                f"no Prefect API answers at {self.prefect_api_url} (from --prefect-api-url or PREFECT_API_URL); "
                "start one, or unset it to let gymforge start its own"
            )
        self._stack.callback(_drain_prefect_logs)
        env[API_ENV] = self.prefect_api_url
        self._stack.enter_context(_environ(env))
        # Settings of this process were read when prefect was imported; environment changes need this to apply.
        from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

        self._stack.enter_context(
            temporary_settings(updates={PREFECT_API_URL: self.prefect_api_url, PREFECT_HOME: env["PREFECT_HOME"]})
        )
        if self.dask and self.dask_address is None:
            self._cluster = self._start_cluster()
            self._stack.callback(self._cluster.close)
            self.dask_address = self._cluster.scheduler_address
        if self.dask_address:
            self._stack.enter_context(_environ({DASK_ENV: self.dask_address}))

    def _start_cluster(self) -> Any:
        from distributed import LocalCluster

        # Dask logs every worker start and stop at INFO; keep the console for the pipeline's own output.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
        logging.getLogger("distributed").setLevel(logging.WARNING)
        # Prefect's background threads keep a worker process alive past the nanny's 4 s close grace; the nanny
        # then kills it, which is the intended end of a worker we are closing anyway.
        logging.getLogger("distributed.nanny").setLevel(logging.ERROR)
        # Worker processes are spawned after the environment above is set, so they inherit PREFECT_API_URL.
        return LocalCluster(**cluster_kwargs(self.n_workers), host="127.0.0.1", local_directory=str(self.root / "dask"))


def _drain_prefect_logs() -> None:
    """Send queued flow and task logs to the API before the server that receives them stops."""
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for this process and its children; restore the previous values afterwards."""
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while a Runtime is open, so the ``with`` block unwinds and stops what it
    started. Only the main thread can install signal handlers; elsewhere this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

"""The runtime gymforge needs: a Prefect server and a Dask cluster, started on demand or attached to.

``Runtime`` takes a lease on the data root's Prefect server (``flows/prefect_server.py``: started on a free loopback
port if none is live, shared by every process of the data root, stopped when the last lease goes, however its
holder ended) and starts a Dask ``LocalCluster`` of single-threaded worker processes (forked from a server that
imported the heavy libraries once, ``WORKER_PRELOAD``); it exports ``PREFECT_API_URL`` to itself and to every
process it starts. Without a real API every Dask worker would start its own ephemeral server on one SQLite file:
28-40 s for a tiny flow and "database is locked" (STACK.md, Prefect).
``prefect_api_url`` and ``dask_address`` attach to running ones instead, and then nothing is started or stopped.

Everything a Runtime started is stopped when the ``with`` block ends, also on Ctrl-C and SIGTERM; Dask's workers
and the server's guardian also notice a SIGKILLed parent.

The data root may be an object store URL (``s3://bucket/prefix``): it is probed (write, read, delete) before anything
starts, and the server's files, the catalog and the Dask scratch space live in its local home
(``data_contracts.objectstore.local_home``). An attached scheduler is checked to answer before any flow runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, Self

from data_contracts.objectstore import local_home
from data_contracts.roots import writable_data_root
from flows.prefect_server import API_ENV, RuntimeStartError, ServerLease, healthy, prefect_env, ui_url

if TYPE_CHECKING:
    from prefect_dask import DaskTaskRunner

DASK_ENV = "GYMFORGE_DASK_ADDRESS"

log = logging.getLogger(__name__)

WORKER_PRELOAD = ("distributed", "great_expectations", "great_expectations.expectations", "polars", "pyarrow",
                  "duckdb", "sqlalchemy")
"""What every stage task imports (the contract gate's GX, frames, the catalog). A Runtime's workers fork from a
server that imported these once instead of each importing them: a 2-worker cluster refreshing the source stages used
24.2 CPU-s instead of 30.8 (bench_cluster_start.py). Prefect stays out: it reads its settings when imported, and
the server may outlive a Runtime."""


QUIET_CLUSTER = {"distributed.worker.profile.enabled": False, "distributed.admin.system-monitor.interval": "2s",
                 "distributed.admin.tick.interval": "200ms"}
"""Dask settings of the cluster a Runtime starts. Its tasks are whole stages (seconds to minutes): the workers'
10 ms statistical profiler, the 500 ms system sampling and the 20 ms event-loop tick, made for graphs of millisecond
tasks, cost an idle 2-worker cluster and its scheduler 6.2 CPU-s a minute; these settings, 1.7 (bench_cluster_idle.py).
A cluster of one's own (``--dask-address``) keeps its own settings."""


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
        self.root = writable_data_root(data_dir)
        self.home = local_home(self.root)  # the server's files, the catalog, Dask's scratch: always local
        self.prefect_api_url = prefect_api_url or os.environ.get(API_ENV) or None
        self.dask_address = dask_address or os.environ.get(DASK_ENV) or None
        self.n_workers = n_workers
        self.dask = dask  # False: only the Prefect API (``gymforge ui``, creating deployment runs)
        self._lease: ServerLease | None = None
        self._cluster: Any = None
        self._stack = contextlib.ExitStack()

    @property
    def started_server(self) -> bool:
        """True when this runtime started the Prefect server (it stops once no process uses it)."""
        return self._lease is not None and self._lease.started

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
        if self.dask and self.dask_address:  # before the server starts: a wrong address fails in seconds
            _check_scheduler(self.dask_address)
        env = prefect_env(self.root)
        if self.prefect_api_url is None:
            self._lease = ServerLease(self.root)
            self.prefect_api_url = self._lease.acquire()
            self._stack.callback(self._lease.release)
        elif not healthy(self.prefect_api_url, timeout=10):
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
        import dask
        from distributed import LocalCluster
        from distributed.utils import get_mp_context

        # Dask logs every worker start and stop at INFO; keep the console for the pipeline's own output.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
        logging.getLogger("distributed").setLevel(logging.WARNING)
        # Prefect's background threads keep a worker process alive past the nanny's 4 s close grace; the nanny
        # then kills it, which is the intended end of a worker we are closing anyway.
        logging.getLogger("distributed.nanny").setLevel(logging.ERROR)
        with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver", **QUIET_CLUSTER}):
            get_mp_context().set_forkserver_preload(list(WORKER_PRELOAD))
            # A forked worker starts with the fork server's environment, which is this process's as it was when the
            # server started: the nanny sets today's (PREFECT_API_URL above included) before the worker runs. A
            # worker the nanny restarts later is spawned: the setting holds for this start only.
            return LocalCluster(**cluster_kwargs(self.n_workers), host="127.0.0.1",
                                local_directory=str(self.home / "dask"), env=dict(os.environ))


def _check_scheduler(address: str, timeout_s: float = 5) -> None:
    """A Dask handshake with the scheduler at ``address``: an unreachable one is one clear error, before any flow.
    A refused connection fails at once: the client alone retries it until its timeout."""
    from distributed import Client
    from distributed.comm import get_address_host_port

    try:
        socket.create_connection(get_address_host_port(address), timeout=timeout_s).close()
        with Client(address, timeout=timeout_s, set_as_default=False):
            pass
    except (OSError, TimeoutError, ValueError) as exc:
        raise RuntimeStartError(f"no Dask scheduler answers at {address} (from --dask-address or "
                                f"{DASK_ENV}): {exc}") from None


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


REDELIVER_S = 0.05


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread while a Runtime is open."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while a Runtime is open, so the ``with`` block unwinds and stops what it
    started. Only the main thread can install signal handlers; elsewhere this is a no-op.

    Python runs a signal handler at whatever the main thread executes next; where that is a finalizer or a callback
    it ignores exceptions from, the exit would be printed as "Exception ignored" and lost, and the command would run
    on. Such a lost exit is delivered again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated(128 + signum)

    def unraisable(info: Any) -> None:
        # while a flow runs, Prefect's own SIGTERM handler raises its TerminationSignal instead (looked up only once
        # a flow loaded Prefect: the runtime's checks come first, without it)
        prefect_errors = sys.modules.get("prefect.exceptions")
        terminations = (Terminated, prefect_errors.TerminationSignal) if prefect_errors else (Terminated,)
        lost = (signal.SIGTERM if isinstance(info.exc_value, terminations)
                else signal.SIGINT if isinstance(info.exc_value, KeyboardInterrupt) else None)
        if lost is not None:
            # from another thread, a moment later: sent from here, the handler would run inside this hook
            threading.Timer(REDELIVER_S, os.kill, (os.getpid(), lost)).start()
        else:
            hook(info)

    previous, hook = signal.signal(signal.SIGTERM, handler), sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = hook

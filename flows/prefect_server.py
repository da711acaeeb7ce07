"""The Prefect server of a data root, alive exactly as long as a process uses it.

A guardian process (``python -m flows.prefect_server ROOT``) runs ``prefect server start`` on a free loopback port
and watches the leases in ``<data>/prefect/leases/``: one file per process using the server (a run, ``gymforge ui``,
a worker), named after its pid, plus ``keep`` for a server left up on purpose (``gymforge ui --detach``). When no
lease holder is alive any more (the runs ended, however they ended: kill -9 included) the guardian stops the server
and exits; the server also dies with its guardian (``PR_SET_PDEATHSIG``). ``server.json`` names the guardian and the
API URL, so every process of the data root shares one server, and its runs show in the UI already open.

The UI the server serves talks to its own API (``PREFECT_UI_API_URL=/api``): by default Prefect points the UI at
port 4200, which is not where our server listens.

The server's database is SQLite in ``<data>/prefect/prefect.db`` (a new one starts as a copy of an empty database
already migrated to the installed Prefect, made once under the cache directory: the migrations are about half of a
first start) unless ``PREFECT_API_DATABASE_CONNECTION_URL`` names another (``postgresql+asyncpg://user:password@host:5432/prefect``, what a team running Prefect for real uses); a
PostgreSQL that refuses the connection is one ``RuntimeStartError`` naming it, before the server starts. For a data
root on an object store these files live in its local home (``data_contracts.objectstore.local_home``).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

from data_contracts.content import cache_dir
from data_contracts.files import atomic_file
from data_contracts.objectstore import local_home

API_ENV = "PREFECT_API_URL"
DATABASE_ENV = "PREFECT_API_DATABASE_CONNECTION_URL"
SERVER_START_TIMEOUT_S = 180.0  # STACK.md measures 5-13 s healthy; a shared 2-core box can be much slower
POLL_S = 0.5
KEEP = "keep"


class RuntimeStartError(RuntimeError):
    """The Prefect server or the Dask cluster could not be started; the message says where the log is."""


def prefect_env(root: Path | str) -> dict[str, str]:
    """Settings every Prefect process of this data root shares (server, flows, Dask workers, deployment runs)."""
    return {
        "PREFECT_HOME": str(local_home(root) / "prefect"),
        # Telemetry lookups fail offline and contend for SQLite; the client's own is off too, and with it the
        # usage-data notice it prints on a terminal (analytics are off, as docs/run-the-pipeline.md says).
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "GYMFORGE_DATA": str(root),
    }


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{api_url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def ui_url(api_url: str) -> str:
    return api_url.removesuffix("/").removesuffix("/api")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _started_at(pid: int) -> float | None:
    """When a live process started (None for a dead one or a zombie, which only waits to be reaped)."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process.create_time()
    except psutil.Error:
        return None


def _redacted(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def check_database(url: str, timeout_s: float = 10) -> None:
    """Connect to the PostgreSQL a server is configured with (``postgresql+asyncpg://...``); a refusal is one
    ``RuntimeStartError`` naming the URL (password hidden). Other databases are Prefect's to open."""
    if not url.startswith(("postgresql", "postgres")):
        return
    import asyncio

    import asyncpg

    async def probe() -> None:
        connection = await asyncpg.connect(re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url),
                                           timeout=timeout_s)
        await connection.close()

    try:
        asyncio.run(probe())
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise RuntimeStartError(f"the Prefect database {_redacted(url)} (from {DATABASE_ENV}) refuses connections: "
                                f"{type(exc).__name__}: {exc}") from None


class ServerHome:
    """The files of a data root's server: ``server.json``, ``server.lock`` and ``leases/``."""

    def __init__(self, root: Path | str) -> None:
        self.root = local_home(root)
        self.home = self.root / "prefect"
        self.record = self.home / "server.json"
        self.leases = self.home / "leases"

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Serializes reading the record and taking a lease against the guardian's decision to stop."""
        self.leases.mkdir(parents=True, exist_ok=True)
        return _exclusive(self.home / "server.lock")

    def live_record(self) -> dict[str, Any] | None:
        """``{pid, api_url}`` of this data root's live server, or None (a stale record is removed)."""
        try:
            info = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        if _started_at(int(info.get("pid", 0))) is not None and healthy(info["api_url"]):
            return info
        self.record.unlink(missing_ok=True)
        return None

    def lease_path(self, holder: str) -> Path:
        return self.leases / holder

    def take_lease(self, holder: str) -> None:
        started = "" if holder == KEEP else str(_started_at(int(holder.split("-")[1])))
        self.lease_path(holder).write_text(started)

    def live_leases(self) -> list[Path]:
        """Leases whose holder is alive; the others (holders killed without releasing) are removed."""
        live = []
        for lease in self.leases.glob("*"):
            if lease.name == KEEP:
                live.append(lease)
                continue
            try:
                pid, started = int(lease.name.split("-")[1]), lease.read_text()
            except (ValueError, IndexError, OSError):
                continue
            if str(_started_at(pid)) == started:  # a reused pid is another process: not a holder
                live.append(lease)
            else:
                lease.unlink(missing_ok=True)
        return live


class ServerLease:
    """A process's use of the data root's server: ``acquire`` starts one if none is live, ``release`` lets the
    guardian stop it once nobody else holds a lease."""

    def __init__(self, root: Path | str, *, keep: bool = False) -> None:
        self.server = ServerHome(root)
        # one file per lease, so two leases of one process (a Runtime inside another) are released separately
        self.holder = KEEP if keep else f"pid-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.api_url = ""
        self.started = False  # this lease started the server (it stops when the last lease goes)

    def acquire(self) -> str:
        with self.server.locked():
            self.server.take_lease(self.holder)
            if (info := self.server.live_record()) is not None:
                self.api_url = info["api_url"]
                return self.api_url
            try:
                check_database(os.environ.get(DATABASE_ENV, ""))
                self.api_url = _start_guardian(self.server)
            except BaseException:
                self.release()
                raise
            self.started = True
            return self.api_url

    def release(self) -> None:
        self.server.lease_path(self.holder).unlink(missing_ok=True)


def stop_server(root: Path | str) -> bool:
    """Stop the data root's server now (``gymforge ui --stop``), whoever holds a lease on it."""
    server = ServerHome(root)
    with server.locked():
        server.lease_path(KEEP).unlink(missing_ok=True)
        info = server.live_record()
        if info is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(info["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _started_at(int(info["pid"])) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def _start_guardian(server: ServerHome) -> str:
    """Spawn the guardian and wait until its server answers; the caller holds the lock."""
    logs = server.root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    server.record.unlink(missing_ok=True)
    log_path = logs / "prefect-server.log"
    env = {key: value for key, value in os.environ.items() if key != API_ENV}
    with log_path.open("ab") as log_file:
        guardian = subprocess.Popen(
            [sys.executable, "-m", "flows.prefect_server", str(server.root)],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,  # Ctrl-C in the terminal reaches the CLI, which releases its lease
        )
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while True:
        if guardian.poll() is not None:
            raise RuntimeStartError(f"the Prefect server exited with code {guardian.returncode}; see {log_path}")
        with contextlib.suppress(OSError, ValueError):
            info = json.loads(server.record.read_text())
            if healthy(info["api_url"]):
                return str(info["api_url"])
        if time.monotonic() > deadline:
            guardian.terminate()
            raise RuntimeStartError(f"the Prefect server was not healthy after {SERVER_START_TIMEOUT_S:.0f} s; "
                                    f"see {log_path}")
        time.sleep(POLL_S)


# --- the guardian process ---------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the server process: receive SIGTERM when the guardian dies, even by SIGKILL (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _drop_record(server: ServerHome) -> None:
    with contextlib.suppress(OSError, ValueError):
        if json.loads(server.record.read_text()).get("pid") == os.getpid():
            server.record.unlink()


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``lock_path`` against other processes (and other threads' opens of it)."""
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _migrated_template() -> Path:
    """An empty SQLite database migrated to the installed Prefect version, made once per cache directory: servers
    starting side by side (a machine's first) wait for the first to make it rather than each migrating one (about
    10 CPU-s each)."""
    from importlib.metadata import version

    template = cache_dir() / "prefect" / f"prefect-{version('prefect')}.db"
    if template.is_file():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(template.parent / "template.lock"):
        if template.is_file():  # made while this process waited
            return template
        with tempfile.TemporaryDirectory(dir=template.parent) as scratch:
            database = Path(scratch) / "prefect.db"
            env = os.environ | {"PREFECT_HOME": scratch, DATABASE_ENV: f"sqlite+aiosqlite:///{database}"}
            subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True,
                           timeout=SERVER_START_TIMEOUT_S)
            os.replace(database, template)
    return template


def _seed_database(database: Path) -> None:
    """A data root's first server starts from a copy of the migrated template; a failure to make one only costs
    the migrations the server then runs itself."""
    if database.exists():
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError), atomic_file(database) as copy:
        shutil.copyfile(_migrated_template(), copy)


def _guard(root: Path) -> int:
    server = ServerHome(root)
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    if not os.environ.get(DATABASE_ENV):
        _seed_database(server.home / "prefect.db")
    env = os.environ | prefect_env(root) | {
        DATABASE_ENV: os.environ.get(DATABASE_ENV) or f"sqlite+aiosqlite:///{server.home / 'prefect.db'}",
        "PREFECT_UI_API_URL": "/api",  # the UI talks to the server that served it, whatever host or port
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "PREFECT_SERVER_API_PORT": str(port),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,  # noqa: PLW1509 - the guardian has no threads
    )
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not healthy(api_url):
            if process.poll() is not None or stopping:
                return 1
            time.sleep(POLL_S)
        server.record.write_text(json.dumps({"pid": os.getpid(), "api_url": api_url}))
        while not stopping and process.poll() is None:
            time.sleep(POLL_S)
            with server.locked():
                if not server.live_leases():
                    _drop_record(server)  # under the lock: nobody takes a lease on a server about to stop
                    break
    finally:
        _drop_record(server)
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(_guard(Path(sys.argv[1])))

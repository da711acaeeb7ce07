"""Real services the scale tests run against, started by the test session on loopback and stopped after it:
an S3 API server (moto's server mode, from PyPI), a PostgreSQL server (Debian's ``postgresql`` package), and a Dask
cluster started with the ``dask scheduler`` / ``dask worker`` command lines, as users run one."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(ready: object, what: str, process: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():  # type: ignore[operator]
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start in {timeout_s:.0f} s")
        time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- S3 --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    key: str
    secret: str

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach the bucket: the standard AWS variables, nothing gymforge-specific."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_DEFAULT_REGION": "us-east-1"}

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server with credentials checked for real: the first four requests (an IAM user, its key, its
    policy, the bucket) are the only unauthenticated ones (``INITIAL_NO_AUTH_ACTION_COUNT``)."""
    import boto3
    import httpx

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               env=os.environ | {"INITIAL_NO_AUTH_ACTION_COUNT": "4"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def up() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{endpoint}/moto-api/", timeout=2).status_code == 200
            return False

        _wait(up, "moto server", process)
        anonymous = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "setup",
                     "aws_secret_access_key": "setup"}
        iam = boto3.client("iam", **anonymous)
        iam.create_user(UserName="gymforge")
        access = iam.create_access_key(UserName="gymforge")["AccessKey"]
        iam.put_user_policy(UserName="gymforge", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        boto3.client("s3", **anonymous).create_bucket(Bucket="gymforge-test")
        yield S3Server(endpoint, "gymforge-test", access["AccessKeyId"], access["SecretAccessKey"])
    finally:
        _stop(process)


# --- PostgreSQL --------------------------------------------------------------------------------------------------


def postgres_bin() -> Path:
    """The PostgreSQL server binaries of Debian's ``postgresql`` package."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: `apt-get install postgresql` (.ci/run does it)")
    return Path(found[-1]).parent


@dataclass(frozen=True)
class Postgres:
    port: int
    user: str = "gymforge"

    def url(self, database: str = "prefect") -> str:
        return f"postgresql+asyncpg://{self.user}@127.0.0.1:{self.port}/{database}"


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    """A throwaway cluster (trust authentication, loopback only) with an empty ``prefect`` database, in a fresh
    directory under the system temp dir (removed afterwards). PostgreSQL refuses to run as root: as root the cluster
    belongs to the ``postgres`` user the package creates (pytest's own temp dirs are private to root)."""
    import asyncpg

    binaries, port = postgres_bin(), free_port()
    directory = Path(tempfile.mkdtemp(prefix="gymforge-pg-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    data = directory / "pgdata"
    initdb = subprocess.run([*as_owner, str(binaries / "initdb"), "-D", str(data), "-U", "gymforge", "--auth=trust",
                             "--no-sync"], capture_output=True, text=True, check=False)
    if initdb.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {initdb.stdout}{initdb.stderr}")
    process = subprocess.Popen([*as_owner, str(binaries / "postgres"), "-D", str(data), "-h", "127.0.0.1",
                                "-p", str(port), "-k", str(directory), "-c", "fsync=off"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def up() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        _wait(up, "postgres", process)
        server = Postgres(port)

        async def create() -> None:
            for attempt in range(50):  # the port opens before the server accepts connections
                try:
                    connection = await asyncpg.connect(f"postgresql://gymforge@127.0.0.1:{port}/postgres")
                except (asyncpg.CannotConnectNowError, OSError):
                    if attempt == 49:
                        raise
                    await asyncio.sleep(0.2)
                else:
                    break
            await connection.execute("CREATE DATABASE prefect")
            await connection.close()

        asyncio.run(create())
        yield server
    finally:
        _stop(process)
        shutil.rmtree(directory, ignore_errors=True)


# --- Dask ----------------------------------------------------------------------------------------------------------


@dataclass
class DaskCluster:
    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)

    def worker_pids(self) -> dict[str, int]:
        """Worker name -> pid of the worker process (the nanny's child) that runs tasks."""
        from distributed import Client

        with Client(self.address, timeout=30, set_as_default=False) as client:
            return client.run(os.getpid)


@contextlib.contextmanager
def dask_cluster(directory: Path, env: dict[str, str], n_workers: int = 2) -> Iterator[DaskCluster]:
    """``dask scheduler`` and ``n_workers`` ``dask worker`` processes (one single-threaded worker each, under its
    nanny, which restarts it when it dies) on loopback, with the environment ``env`` and, as its Dask settings, those
    of a Runtime's cluster (``QUIET_CLUSTER``: idle, it would otherwise cost the suite a few CPU-s a minute)."""
    from distributed import Client

    from flows.runtime import QUIET_CLUSTER

    env = env | {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
                 for key, value in QUIET_CLUSTER.items()}

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = (directory / "dask.log").open("ab")
    scheduler = subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env)
    cluster = DaskCluster(address, scheduler)
    try:
        for i in range(n_workers):
            cluster.workers.append(subprocess.Popen(
                [str(BIN / "dask"), "worker", address, "--name", f"w{i}", "--nworkers", "1", "--nthreads", "1",
                 "--no-dashboard", "--local-directory", str(directory / f"w{i}")],
                stdout=log, stderr=subprocess.STDOUT, env=env))
        with Client(address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(n_workers, timeout=120)
        yield cluster
    finally:
        for process in [*cluster.workers, scheduler]:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in [*cluster.workers, scheduler]:
            _stop(process)
        log.close()

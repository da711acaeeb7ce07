"""Beyond one machine, as users run it: a ``dask scheduler`` with two ``dask worker`` processes that share no disk with
the driver (each its own cache directory), a data root on an S3 API server (moto's server mode), Prefect on a real
PostgreSQL, two refreshes and a backfill at once on one data root, a worker killed mid-task, and every bad setting
refused with one clear line before any stage runs. Every run goes through the ``gymforge`` command line in its own
process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from services import DaskCluster, S3Server, dask_cluster, postgres_server, s3_server

from data_contracts import fsck
from data_contracts.catalog import Catalog
from data_contracts.roots import open_store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GYMFORGE = str(Path(sys.executable).parent / "gymforge")
SQUARE = ("test_double_source", "test_double_other", "test_double_square")


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


def _env(tmp: Path, s3: S3Server, **extra: str) -> dict[str, str]:
    """A driver's environment: the bucket's credentials, the test-double stages, its own cache (its local home)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS", "GYMFORGE_DATA")}
    return env | s3.env | {"GYMFORGE_STAGE_MODULES": "stages_for_tests,cluster_stages",
                           "GYMFORGE_CACHE": str(tmp / "driver-cache")} | extra


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[DaskCluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    with dask_cluster(tmp, _env(tmp, s3, GYMFORGE_CACHE=str(tmp / "worker-cache"))) as started:
        yield started


def gymforge(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GYMFORGE, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _outputs(root: str | Path, partition: str) -> dict[tuple[str, str], dict[str, str]]:
    """(stage, key) -> output -> SHA-256 of every published artifact of a partition."""
    return {(m["stage"], m["key"]): {name: out["sha256"] for name, out in m["outputs"].items()}
            for m, status in open_store(root).manifests() if status == "published" and m["partition"] == partition}


def _scheduled(cluster: DaskCluster) -> int:
    """Task state transitions the CLI cluster's scheduler has made: grows only when tasks run there."""
    from distributed import Client

    with Client(cluster.address, timeout=30, set_as_default=False) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


def test_refresh_on_dask_workers_and_s3_matches_a_local_cluster(cluster: DaskCluster, s3: S3Server, runtime: object,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slow (20-30 s on 2 cores) by its subject: seven commands, each its own process, against the cluster (the two
    runs side by side)."""
    from flows.dag import refresh

    for name, value in s3.env.items():  # this process reads the S3 root too
        monkeypatch.setenv(name, value)
    env = _env(tmp_path, s3, PREFECT_API_URL=runtime.prefect_api_url)  # the session's server
    local, remote = tmp_path / "data", s3.url("refresh")
    before = _scheduled(cluster)
    runs = [subprocess.Popen([GYMFORGE, "--data-dir", root, "--dask-address", cluster.address, "run",
                              "test_double_square", "--partition", "c0"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for root in (str(local), remote)]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert _scheduled(cluster) - before >= 2 * len(SQUARE) * 3  # every stage task ran on the CLI cluster
    refresh(runtime, stages=["test_double_square"], partition="c0")  # the same on a LocalCluster

    reference = _outputs(runtime.root, "c0")
    assert sorted(stage for stage, _ in reference) == sorted(SQUARE)
    assert _outputs(local, "c0") == reference == _outputs(remote, "c0")  # same keys, byte-identical files
    assert not list((tmp_path / "driver-cache").rglob("artifacts"))  # the S3 root's files live on S3 only

    listed = gymforge("--data-dir", remote, "artifacts", "ls", "--stage", "test_double_square", env=env)
    assert listed.returncode == 0 and next(key for _, key in reference if key in listed.stdout)
    # another machine (another local home) rebuilds its catalog from the manifests and finds the store sound
    elsewhere = env | {"GYMFORGE_CACHE": str(tmp_path / "elsewhere")}
    checked = gymforge("--data-dir", remote, "artifacts", "fsck", env=elsewhere)
    assert checked.returncode == 0 and "store and catalog agree" in checked.stdout, checked.stdout + checked.stderr

    # a writer killed before its commit left an attempt no manifest names: gc removes it, the artifacts stay
    store = open_store(remote)
    stage, key = next(iter(reference))
    dead = f"{store.base}/artifacts/{stage}/{key}/a1000-otherhost-1-abcd"
    store.fs.pipe_file(f"{dead}/rows.parquet", b"partial")
    collected = gymforge("--data-dir", remote, "artifacts", "gc", env=elsewhere)
    assert collected.returncode == 0 and "1 uncommitted write(s) removed" in collected.stdout, collected.stdout
    assert store.leftovers() == [] and _outputs(remote, "c0") == reference


def test_a_worker_killed_mid_task_is_survived(cluster: DaskCluster, s3: S3Server, runtime: object,
                                              tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    profile = tmp_path / "slow.yaml"
    profile.write_text(yaml.safe_dump({"test_double_slow": {"seconds": 6, "marker_dir": str(markers)}}))
    env = _env(tmp_path, s3, PREFECT_API_URL=runtime.prefect_api_url)
    root = tmp_path / "data"
    run = subprocess.Popen([GYMFORGE, "--data-dir", str(root), "--dask-address", cluster.address, "run",
                            "test_double_slow", "--profile", str(profile)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not list(markers.iterdir()):
        assert run.poll() is None and time.monotonic() < deadline, "the slow stage never started"
        time.sleep(0.2)
    [first] = [int(p.name) for p in markers.iterdir()]
    os.kill(first, signal.SIGKILL)  # the worker process running the task; its nanny starts a new one
    output, _ = run.communicate(timeout=240)
    assert run.returncode == 0, output

    attempts = sorted(int(p.name) for p in markers.iterdir())
    assert len(attempts) == 2 and first in attempts  # the task ran again on another worker process ...
    assert len(Catalog(root).entries(stage="test_double_slow")) == 1  # ... and published once
    assert fsck.check(open_store(root), Catalog(root)) == []


def _published_stages(output: str) -> list[str]:
    """Stages a run's summary table says it published (the others it found cached)."""
    return [line.split()[0] for line in output.splitlines()
            if line.split()[:1] and line.split()[0] in SQUARE and " published " in f" {line} "]


def test_two_refreshes_and_a_backfill_at_once_on_one_data_root(cluster: DaskCluster, s3: S3Server,
                                                               tmp_path: Path) -> None:
    """Two refreshes and a backfill of the same partition, started together: they start the data root's Prefect
    server race-free (one wins, the others lease it), publish each artifact once between them, and neither they nor a
    reader of the catalog meanwhile sees "database is locked". Slow (about 30 s on 2 cores) by its subject: three
    commands, each its own process, race to start one server."""
    from data_contracts.content import cache_dir

    root = tmp_path / "data"
    # a local root: the machine's cache will do, whose migrated Prefect database the session's server made
    env = _env(tmp_path, s3, GYMFORGE_CACHE=str(cache_dir()))
    common = [GYMFORGE, "--data-dir", str(root), "--dask-address", cluster.address]
    commands = [[*common, "run", "test_double_square", "--partition", "both"]] * 2
    commands.append([*common, "backfill", "--stage", "test_double_square", "--partitions", "both", "--serve"])
    runs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for command in commands]
    errors: list[BaseException] = []
    stop = threading.Event()

    def read_catalog() -> None:
        while not stop.is_set():
            try:
                if Catalog(root).path.exists():
                    Catalog(root).artifacts()
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
            time.sleep(0.05)

    reader = threading.Thread(target=read_catalog)
    reader.start()
    try:
        outputs = [run.communicate(timeout=600)[0] for run in runs]  # three runs on two cores
    finally:
        stop.set()
        reader.join()
    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    assert errors == []
    assert not any("locked" in output for output in outputs)
    [backfill_run] = [line.split()[1] for line in outputs[2].splitlines() if line.split()[:1] == ["both"]]
    assert "Completed" in outputs[2]
    # each artifact published by exactly one of the three: the refreshes say so in their summaries, the backfill's
    # copies carry its flow run id
    by_backfill = [m["stage"] for m, _ in open_store(root).manifests() if m["flow_run_id"] == backfill_run]
    published = sorted([stage for output in outputs[:2] for stage in _published_stages(output)] + by_backfill)
    assert published == sorted(SQUARE)
    catalog = Catalog(root)
    assert sorted(catalog.artifacts()["stage"].to_list()) == sorted(SQUARE)
    assert fsck.check(open_store(root), catalog) == []


def test_prefect_on_postgres(cluster: DaskCluster, s3: S3Server, tmp_path: Path) -> None:
    """The command's Prefect server keeps its runs in PostgreSQL, not the data root's SQLite. Slow (20-30 s on 2
    cores) by its subject: a PostgreSQL server starts and Prefect migrates a new database on it (the migrated SQLite
    template other servers copy does not apply)."""
    import asyncpg

    with postgres_server() as postgres:
        env = _env(tmp_path, s3, PREFECT_API_DATABASE_CONNECTION_URL=postgres.url())
        root = tmp_path / "data"
        done = gymforge("--data-dir", str(root), "--dask-address", cluster.address, "run", "test_double_square",
                        "--partition", "pg", env=env)
        assert done.returncode == 0, done.stdout + done.stderr

        async def runs() -> list[tuple[str, str]]:
            connection = await asyncpg.connect(f"postgresql://gymforge@127.0.0.1:{postgres.port}/prefect")
            try:
                return [tuple(r) for r in await connection.fetch("SELECT name, state_name FROM flow_run")]
            finally:
                await connection.close()

        assert asyncio.run(runs()) == [("data-refresh tiny/pg", "Completed")]
    assert not (root / "prefect" / "prefect.db").exists()  # the embedded SQLite stays unused
    assert sorted(Catalog(root).artifacts()["stage"].to_list()) == sorted(SQUARE)


@pytest.mark.parametrize("setting", ["endpoint", "credentials", "bucket", "scheduler", "postgres"])
def test_bad_settings_are_one_clear_error_before_any_stage_runs(s3: S3Server, tmp_path: Path, setting: str) -> None:
    env = _env(tmp_path, s3, AWS_MAX_ATTEMPTS="1")
    root, args = s3.url("bad"), []
    if setting == "endpoint":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    elif setting == "credentials":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    elif setting == "bucket":
        root = "s3://no-such-bucket-gymforge/data"
    elif setting == "scheduler":
        args = ["--dask-address", "tcp://127.0.0.1:9"]
    else:
        root = str(tmp_path / "data")
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = "postgresql+asyncpg://gymforge:hunter2@127.0.0.1:9/prefect"
    done = gymforge("--data-dir", root, *args, "run", "test_double_square", env=env, timeout=120)
    expected = {"endpoint": f"error: data root {root}: cannot reach the object store at http://127.0.0.1:9",
                "credentials": f"error: data root {root}: access denied",
                "bucket": f"error: data root {root}: the bucket does not exist",
                "scheduler": "error: no Dask scheduler answers at tcp://127.0.0.1:9",
                "postgres": "error: the Prefect database postgresql+asyncpg://gymforge:***@127.0.0.1:9/prefect "
                            "(from PREFECT_API_DATABASE_CONNECTION_URL) refuses connections"}[setting]
    assert done.returncode == 1 and done.stderr.startswith(expected), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stdout + done.stderr
    assert "hunter2" not in done.stderr
    assert not (tmp_path / "data" / "artifacts").exists()  # nothing ran, nothing was half-published

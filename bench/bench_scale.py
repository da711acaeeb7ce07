"""Beyond one machine (issue 15), measured side by side in one run:

1. refresh wall time of the same CPU-bound stage on several partitions on a 2-worker cluster started with the
   ``dask scheduler`` / ``dask worker`` command lines vs a 2-worker ``LocalCluster`` (one Prefect server for both);
2. publish throughput (artifacts/s and MB/s) of ``ArtifactStore.publish`` to the local filesystem vs an S3 API server
   (moto's server mode on loopback: it measures the protocol and gymforge's commit, not a real S3's network);
3. catalog rebuild time from the manifests at 10,000 artifacts, local and on the S3 API server.

The services are started as the test session starts them (tests/support/services.py).

    .venv/bin/python -m bench.bench_scale [--partitions 4] [--rounds 4000000] [--publish 40] [--artifacts 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from bench import report
from bench.bench_dask import STAGE, _run_partitions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from services import dask_cluster, s3_server


def refresh_walls(root: Path, address: str, partitions: int, rounds: int) -> dict[str, float]:
    """Best of two rounds per cluster (after a warm-up that imports the stage in every worker)."""
    from flows.runtime import Runtime

    walls = {}
    for name, kwargs in (("dask worker CLI", {"dask_address": address}), ("LocalCluster", {"n_workers": 2})):
        with Runtime(root, **kwargs) as runtime:
            _run_partitions(runtime, [f"warm-{name[:5]}-{i}" for i in range(2)], 1)
            walls[name] = min(_run_partitions(runtime, [f"p{i}" for i in range(partitions)], rounds)[0]
                              for _ in range(2))
    return walls


def _frame(rows: int, seed: int) -> pl.DataFrame:
    """Incompressible rows (random 64-bit values), so bytes written are bytes measured."""
    return pl.DataFrame({"v": np.random.default_rng(seed).integers(0, 2**62, rows)})


def publish_rate(root: str, count: int, rows: int) -> tuple[float, float]:
    """(artifacts/s, MB/s) of ``count`` first publishes of one output of ``rows`` 64-bit values each."""
    from data_contracts.roots import open_store
    from data_contracts.stage import Contract, Params, Stage

    store = open_store(root)
    stage = Stage("bench_publish", "1", (), Params, {"x": Contract()}, lambda i, p, s: {})
    frames = [_frame(rows, i) for i in range(count)]
    start = time.perf_counter()
    written = 0
    for i, frame in enumerate(frames):
        manifest = store.manifest(stage, f"{i:020d}", partition="p0", params=Params(), input_keys={})
        written += store.publish(manifest, {"x": frame}).bytes
    seconds = time.perf_counter() - start
    return count / seconds, written / seconds / 1e6


def publish_small(root: str, count: int) -> float:
    """Seconds to publish ``count`` one-row artifacts through ``ArtifactStore.publish``."""
    from data_contracts.roots import open_store
    from data_contracts.stage import Contract, Params, Stage

    store = open_store(root)
    stage = Stage("bench_rebuild", "1", (), Params, {"x": Contract()}, lambda i, p, s: {})
    frame = pl.DataFrame({"v": [1]})
    start = time.perf_counter()
    for i in range(count):
        store.publish(store.manifest(stage, f"{i:020d}", partition=f"p{i % 100}", params=Params(), input_keys={}),
                      {"x": frame})
    return time.perf_counter() - start


def copy_to_object_store(local: str, url: str) -> float:
    """Seconds to lay the local store's artifacts out on the object store as committed attempts (batched, concurrent
    uploads: publishing 10,000 one by one through a loopback S3 server would measure the server, not the rebuild)."""
    from data_contracts.roots import open_store
    from data_contracts.store import MANIFEST

    store, target = open_store(local), open_store(url)
    start = time.perf_counter()
    batch: dict[str, bytes] = {}
    for manifest, _ in store.manifests():
        directory = f"{target.base}/artifacts/{manifest['stage']}/{manifest['key']}"
        source = store.path(manifest["stage"], manifest["key"])
        for output in manifest["outputs"].values():
            batch[f"{directory}/a0-bench-0-0/{output['file']}"] = (source / output["file"]).read_bytes()
        batch[f"{directory}/{MANIFEST}"] = json.dumps({**manifest, "attempt": "a0-bench-0-0"}).encode()
        if len(batch) >= 2000:
            target.fs.pipe(batch)
            batch = {}
    if batch:
        target.fs.pipe(batch)
    return time.perf_counter() - start


def rebuild_time(root: str) -> tuple[float, int]:
    """(seconds to rebuild the catalog from the manifests, rows rebuilt)."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store

    start = time.perf_counter()
    rows = Catalog(root).rebuild(open_store(root))
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4, help="partitions per refresh round")
    parser.add_argument("--rounds", type=int, default=4_000_000, help="blake2b rounds per partition")
    parser.add_argument("--publish", type=int, default=40, help="artifacts per publish-throughput arm")
    parser.add_argument("--rows", type=int, default=125_000, help="64-bit values per published artifact (1 MB)")
    parser.add_argument("--artifacts", type=int, default=10_000, help="artifacts for the catalog rebuild")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()

    from flows.registry import EXTRA_MODULES_ENV
    from flows.runtime import Runtime

    os.environ[EXTRA_MODULES_ENV] = ",".join(filter(None, [os.environ.get(EXTRA_MODULES_ENV), "bench.cpu_stage"]))
    tmp = Path(tempfile.mkdtemp(prefix="gymforge-bench-scale-"))
    os.environ["GYMFORGE_CACHE"] = str(tmp / "cache")
    try:
        with s3_server() as s3:
            os.environ.update(s3.env)
            # `dask worker` processes import the benchmark stage from this checkout, as LocalCluster's do
            project = str(Path(__file__).resolve().parents[1])
            path = os.pathsep.join(filter(None, [project, os.environ.get("PYTHONPATH")]))
            workers_env = os.environ | {"PYTHONPATH": path}
            with Runtime(tmp / "data", dask=False), dask_cluster(tmp, workers_env) as cluster:
                walls = refresh_walls(tmp / "data", cluster.address, args.partitions, args.rounds)
            rates = {"local filesystem": publish_rate(str(tmp / "publish"), args.publish, args.rows),
                     "S3 API server": publish_rate(s3.url("publish"), args.publish, args.rows)}
            laid_out = {"local filesystem": publish_small(str(tmp / "rebuild"), args.artifacts),
                        "S3 API server": copy_to_object_store(str(tmp / "rebuild"), s3.url("rebuild"))}
            rebuilds = {"local filesystem": rebuild_time(str(tmp / "rebuild")),
                        "S3 API server": rebuild_time(s3.url("rebuild"))}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    cli, local = walls["dask worker CLI"], walls["LocalCluster"]
    machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
               f"load average {os.getloadavg()[0]:.1f} at the end")
    mb = args.rows * 8 / 1e6
    lines = [
        "",
        "## Beyond one machine: dask worker cluster, object-store data root, catalog rebuild (bench/bench_scale.py)",
        "",
        f"Machine: {machine}. Services on loopback, started as the tests start them.",
        "",
        (f"Refresh of `{STAGE}` ({args.rounds:,} rounds) on {args.partitions} partitions at once, 2 single-threaded "
        "workers, one Prefect server, best of 2 after a warm-up:"),
        "",
        "| cluster | wall s |",
        "| --- | --- |",
        f"| `dask scheduler` + 2 `dask worker` processes | {cli:.2f} |",
        f"| `LocalCluster(n_workers=2)` | {local:.2f} |",
        "",
        f"The command-line cluster takes **{cli / local:.2f}x** the LocalCluster's wall time.",
        "",
        (f"Publish throughput, {args.publish} first publishes of one {mb:.1f} MB incompressible Parquet output each "
        "(files, SHA-256, manifest; the S3 arm uploads to an attempt prefix and commits the manifest with a "
        "conditional create):"),
        "",
        "| data root | artifacts/s | MB/s |",
        "| --- | --- | --- |",
        *(f"| {name} | {per_s:.1f} | {mb_s:.1f} |" for name, (per_s, mb_s) in rates.items()),
        "",
        (f"Catalog rebuild from the manifests at {args.artifacts:,} one-row artifacts (laid out by `publish` one by one "
        "locally, copied to the S3 server in concurrent batches):"),
        "",
        "| data root | laying them out s | rebuild s | rows |",
        "| --- | --- | --- | --- |",
        *(f"| {name} | {laid_out[name]:.1f} | {seconds:.2f} | {rows:,} |" for name, (seconds, rows) in rebuilds.items()),
        "",
    ]
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

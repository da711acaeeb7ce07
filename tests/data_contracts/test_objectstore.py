"""The artifact store on an object store, against a real S3 API server (moto's server mode, started for this module):
the manifest is the commit marker, a reader trusts only what matches it, concurrent writers of one key commit once,
and uncommitted attempts are garbage-collected past a bound."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from services import S3Server, s3_server

from data_contracts import fsck
from data_contracts.catalog import Catalog
from data_contracts.objectstore import (
    ObjectArtifactStore,
    ObjectStoreError,
    check_root,
    is_remote,
    local_home,
)
from data_contracts.roots import open_store
from data_contracts.runner import run_serially
from data_contracts.stage import Contract, DirectoryContract, Params, Stage, StageError
from data_contracts.store import ArtifactStore

STAGE = "_test_double_remote"
FRAMES = {"x": pl.DataFrame({"v": list(range(100))})}
_STAGE = Stage(STAGE, "1", (), Params, {"x": Contract()}, lambda i, p, s: {})


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def root(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh prefix of the bucket per test, credentials in the standard AWS variables, a private local home."""
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GYMFORGE_CACHE", str(tmp_path / "cache"))
    return s3.url(request.node.name.replace("[", "-").replace("]", ""))


def _manifest(store: ArtifactStore, key: str, run: str = "r1") -> dict:
    return store.manifest(_STAGE, key, partition="p0", params=Params(), input_keys={}, flow_run_id=run)


def test_a_url_root_is_an_object_store_with_a_local_home(root: str) -> None:
    store = open_store(root)
    assert isinstance(store, ObjectArtifactStore) and store.remote and is_remote(root)
    assert not is_remote("/tmp/data") and not is_remote("file:///tmp/data")
    assert local_home(root) == store.home and local_home(root) != local_home(root + "-other")
    assert local_home("/tmp/data") == Path("/tmp/data")


def test_publish_read_and_replace_round_trip(root: str) -> None:
    store = open_store(root)
    key = "a" * 20
    assert store.get(STAGE, key) is None
    published = store.publish(_manifest(store, key), FRAMES)
    assert published.location == f"{root}/artifacts/{STAGE}/{key}" == store.path(STAGE, key)
    again = open_store(root).get(STAGE, key)
    assert again is not None and again.read("x").equals(FRAMES["x"]) and again.rows == {"x": 100}
    assert again.manifest["outputs"]["x"]["sha256"] == published.manifest["outputs"]["x"]["sha256"]

    replaced = store.publish(_manifest(store, key, "r2"), {"x": pl.DataFrame({"v": [7]})}, replace=True)
    assert replaced.manifest["attempt"] != published.manifest["attempt"]
    assert store.get(STAGE, key).read("x")["v"].to_list() == [7]
    assert store.leftovers() == []  # the replaced attempt was deleted after the commit


def test_nothing_is_published_until_the_manifest_is_written(root: str) -> None:
    store = open_store(root)
    key = "b" * 20
    manifest = _manifest(store, key)
    commit = store._commit
    store._commit = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        store.publish(manifest, FRAMES)
    store._commit = commit  # type: ignore[method-assign]
    assert store.get(STAGE, key) is None
    assert store.leftovers() == []  # a writer that failed before its commit removes its attempt


def test_a_reader_trusts_only_files_that_match_the_manifest(root: str) -> None:
    store = open_store(root)
    key = "c" * 20
    published = store.publish(_manifest(store, key), FRAMES)
    prefix = f"{store.base}/artifacts/{STAGE}/{key}/{published.manifest['attempt']}"
    data = store.fs.cat_file(f"{prefix}/x.parquet")

    store.fs.pipe_file(f"{prefix}/x.parquet", data[:-10])  # truncated: the size check rejects it
    assert open_store(root).get(STAGE, key) is None
    flipped = bytes([data[0] ^ 1]) + data[1:]  # same size, other bytes: the hash check rejects it on read
    store.fs.pipe_file(f"{prefix}/x.parquet", flipped)
    fresh = open_store(root).get(STAGE, key)
    assert fresh is not None
    with pytest.raises(StageError, match="does not match its manifest"):
        fresh.read("x")
    assert not fresh.path.joinpath("x.parquet").exists()  # nothing unverified is left in the cache

    problems = fsck.check(store, Catalog(root))
    assert [p.kind for p in problems if p.kind == "broken artifact"] == ["broken artifact"]
    fsck.repair(store, Catalog(root))
    assert store.get(STAGE, key) is None and fsck.check(store, Catalog(root)) == []


def test_concurrent_writers_of_one_key_commit_exactly_once(root: str) -> None:
    key = "d" * 20
    stores = [open_store(root) for _ in range(4)]
    manifests = [_manifest(store, key, f"r{i}") for i, store in enumerate(stores)]
    results: list = [None] * len(stores)
    barrier = threading.Barrier(len(stores))

    def write(i: int) -> None:
        barrier.wait()
        results[i] = stores[i].publish(manifests[i], FRAMES)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = {result.manifest["publish_id"] for result in results}
    assert len(winners) == 1  # every writer returns the one committed copy
    assert winners <= {m["publish_id"] for m in manifests}
    assert stores[0].leftovers() == []  # the losers deleted their attempts


def test_gc_removes_only_uncommitted_attempts_past_the_bound(root: str) -> None:
    store = open_store(root)
    key = "e" * 20
    store.publish(_manifest(store, key), FRAMES)
    dead = f"{store.base}/artifacts/{STAGE}/{'f' * 20}/a1000-otherhost-1-abcd"  # a writer killed in 1970
    store.fs.pipe_file(f"{dead}/x.parquet", b"partial")
    young = f"{store.base}/artifacts/{STAGE}/{'f' * 20}/{'a'}{10**13}-otherhost-2-abcd"  # one still uploading
    store.fs.pipe_file(f"{young}/x.parquet", b"partial")
    assert len(store.leftovers()) == 2
    assert [p.kind for p in fsck.check(store, Catalog(root))].count("leftover") == 2

    assert store.gc(older_than_s=3600) == [store._url(dead)]
    assert store.leftovers() == [store._url(young)]
    assert store.get(STAGE, key) is not None  # committed artifacts are never garbage


def test_quarantine_and_directory_artifacts(root: str, tmp_path: Path) -> None:
    from data_contracts.gate import GateReport

    store = open_store(root)
    key = "f" * 20
    report = GateReport(stage=STAGE, output="x", partition="p0", passed=False, rows=100, results=[], failing_rows=[],
                        seconds=0.0)
    assert store.quarantine(_manifest(store, key), FRAMES, {"x": report}) == f"{root}/_quarantine/{STAGE}/{key}"
    assert store.quarantined(STAGE, key) is not None
    assert store.validation(STAGE, key, "quarantined")["x"]["passed"] is False
    assert [status for _, status in store.manifests()] == ["quarantined"]
    store.remove_quarantine(STAGE, key)
    assert store.quarantined(STAGE, key) is None

    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "weights.bin").write_bytes(b"\0" * 1000)
    (model / "sub" / "config.json").write_text("{}")
    directory_stage = Stage(STAGE, "1", (), Params, {"x": Contract()}, lambda i, p, s, d: {}, kind="model",
                            directory=DirectoryContract("model"))
    manifest = store.manifest(directory_stage, key, partition="p0", params=Params(), input_keys={})
    published = store.publish(manifest, FRAMES, directory=model)
    fetched = open_store(root).get(STAGE, key).directory
    assert fetched != model and (fetched / "weights.bin").read_bytes() == b"\0" * 1000
    assert json.loads((fetched / "sub" / "config.json").read_text()) == {}
    assert published.bytes == published.manifest["outputs"]["x"]["bytes"] + 1002


def test_stages_run_and_the_catalog_rebuilds_from_the_manifests(root: str) -> None:
    import stages_for_tests  # noqa: F401 - registers the test-double stages

    store, catalog = open_store(root), Catalog(root)
    assert catalog.path.parent == local_home(root)
    runs = run_serially(store, None, ["test_double_square"], {}, "p0", progress=False)  # type: ignore[arg-type]
    assert not catalog.path.exists()  # no writer recorded rows: the manifests are the truth
    assert catalog.rebuild(store) == 3
    assert sorted(catalog.artifacts()["key"].to_list()) == sorted(run.key for run in runs.values())
    assert fsck.check(store, catalog) == []
    square = store.get("test_double_square", runs["test_double_square"].key)
    assert square.read("numbers").height == 10


@pytest.mark.parametrize("what", ["endpoint", "credentials", "bucket"])
def test_bad_object_store_settings_are_one_clear_error(s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                                       what: str) -> None:
    env = s3.env | {"AWS_MAX_ATTEMPTS": "1"}
    url = s3.url("bad")
    if what == "endpoint":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # the discard port: nothing listens
    elif what == "credentials":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    else:
        url = "s3://no-such-bucket-gymforge/prefix"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    expected = {"endpoint": r"cannot reach the object store at http://127\.0\.0\.1:9",
                "credentials": "access denied", "bucket": "the bucket does not exist"}[what]
    with pytest.raises(ObjectStoreError, match=expected) as raised:
        check_root(url)
    assert url in str(raised.value)

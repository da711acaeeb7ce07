from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_contracts import store as store_module
from data_contracts.gate import validate
from data_contracts.roots import open_store
from data_contracts.stage import Contract, Expect, Params, Stage, StageError
from data_contracts.store import MANIFEST, VALIDATION, ArtifactStore


class _TestDoubleParams(Params):
    n: int = 3
    mode: str = "a"


def _stage(version: str = "1", inputs: tuple[str, ...] = ()) -> Stage:
    # Built directly (not registered): the store only needs its name, version and params.
    return Stage("_test_double_store", version, inputs, _TestDoubleParams, {"x": Contract()}, lambda i, p, s: {})


FRAMES = {"x": pl.DataFrame({"i": [1, 2, 3], "s": ["a", "b", None]}), "rejected": pl.DataFrame({"reason": ["dup"]})}


def _manifest(store: ArtifactStore, key: str = "k" * 20, stage: Stage | None = None) -> dict:
    stage = stage or _stage()
    return store.manifest(stage, key, partition="p0", params=_TestDoubleParams(), input_keys={})


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return open_store(tmp_path)


def _leftovers(store: ArtifactStore) -> list[Path]:
    return [p for base in (store.artifacts_dir, store.quarantine_dir) for p in base.glob("*/.tmp-*")]


def test_publish_get_round_trip(store: ArtifactStore) -> None:
    published = store.publish(_manifest(store), FRAMES)
    got = store.get("_test_double_store", "k" * 20)
    assert got is not None and got.path == store.path("_test_double_store", "k" * 20)
    assert sorted(got.outputs) == ["rejected", "x"]
    for name, frame in FRAMES.items():
        assert got.read(name).equals(frame)
        assert got.scan(name).collect().equals(frame)
    manifest = json.loads((got.path / MANIFEST).read_text())
    assert manifest == published.manifest
    assert manifest["outputs"]["x"]["rows"] == 3 and manifest["outputs"]["x"]["columns"] == {"i": "Int64", "s": "String"}
    assert set(manifest) >= {"stage", "version", "key", "partition", "params", "input_keys", "code_version",
                             "outputs", "timings", "flow_run_id", "contract"}
    assert set(manifest["code_version"]) == {"git_sha", "dirty"}
    with pytest.raises(StageError, match="has no output 'nope'.*rejected, x"):
        got.read("nope")


def test_get_is_none_unless_every_file_exists(store: ArtifactStore) -> None:
    assert store.get("_test_double_store", "k" * 20) is None
    published = store.publish(_manifest(store), FRAMES)
    (published.path / "x.parquet").unlink()
    assert store.get("_test_double_store", "k" * 20) is None
    # a republish replaces the broken directory
    assert store.publish(_manifest(store), FRAMES).read("x").equals(FRAMES["x"])


def test_artifact_key_is_stable() -> None:
    # Pinned: a change here silently invalidates every cached artifact, so it must be deliberate.
    key = ArtifactStore.artifact_key(_stage(), _TestDoubleParams(), {"b": "2", "a": "1"}, "p0")
    assert key == ArtifactStore.artifact_key(_stage(), _TestDoubleParams(n=3), {"a": "1", "b": "2"}, "p0")
    payload = {"inputs": {"a": "1", "b": "2"}, "params": {"mode": "a", "n": 3}, "partition": "p0",
               "stage": "_test_double_store", "version": "1"}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    assert key == hashlib.sha256(canonical.encode()).hexdigest()[:20] == "c022f9a2caf6e45304d5"


@pytest.mark.parametrize(
    "change",
    [
        {"params": _TestDoubleParams(n=4)},
        {"params": _TestDoubleParams(mode="b")},
        {"stage": _stage(version="2")},
        {"inputs": {"a": "1", "b": "3"}},
        {"inputs": {"a": "1"}},
        {"partition": "p1"},
    ],
    ids=["param-n", "param-mode", "version", "input-key", "input-set", "partition"],
)
def test_artifact_key_is_sensitive(change: dict) -> None:
    base = {"stage": _stage(), "params": _TestDoubleParams(), "inputs": {"a": "1", "b": "2"}, "partition": "p0"}
    changed = {**base, **change}
    key = ArtifactStore.artifact_key
    assert key(changed["stage"], changed["params"], changed["inputs"], changed["partition"]) != key(
        base["stage"], base["params"], base["inputs"], base["partition"]
    )


def test_identical_frames_give_identical_bytes(tmp_path: Path) -> None:
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    pa, pb = a.publish(_manifest(a), FRAMES), b.publish(_manifest(b), FRAMES)
    for name in FRAMES:
        assert pa.file(name).read_bytes() == pb.file(name).read_bytes()


def test_kill_during_write_leaves_nothing_published(store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real = store_module._write_parquet
    written = []

    def fail_after_first(frame: pl.DataFrame, path: Path) -> int:
        if written:
            raise KeyboardInterrupt("killed mid-write")
        written.append(path)
        return real(frame, path)

    monkeypatch.setattr(store_module, "_write_parquet", fail_after_first)
    with pytest.raises(KeyboardInterrupt):
        store.publish(_manifest(store), FRAMES)
    assert written and store.get("_test_double_store", "k" * 20) is None
    assert not store.path("_test_double_store", "k" * 20).exists()
    assert _leftovers(store) == []
    monkeypatch.setattr(store_module, "_write_parquet", real)
    assert store.publish(_manifest(store), FRAMES).read("x").equals(FRAMES["x"])


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import polars as pl
    from data_contracts import store as store_module
    from data_contracts.stage import Contract, Params, Stage

    class P(Params):
        n: int = 3
        mode: str = "a"

    real = store_module._write_parquet
    def slow_second(frame, path):
        if path.name == "y.parquet":  # the first file is on disk: signal the parent, then hang until killed
            Path(sys.argv[2]).write_text("ready")
            time.sleep(60)
        return real(frame, path)
    store_module._write_parquet = slow_second

    store = store_module.ArtifactStore(Path(sys.argv[1]))
    stage = Stage("_test_double_store", "1", (), P, {"x": Contract()}, lambda i, p, s: {})
    manifest = store.manifest(stage, "k" * 20, partition="p0", params=P(), input_keys={})
    big = pl.DataFrame({"i": range(200_000)}).with_columns(s=pl.col("i").cast(pl.String))
    store.publish(manifest, {"x": big, "y": big})
    """
)


def test_sigkill_mid_write_then_rerun(store: ArtifactStore, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(store.root), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), f"writer exited early with {proc.returncode}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert store.get("_test_double_store", "k" * 20) is None
    leftovers = _leftovers(store)
    assert len(leftovers) == 1 and (leftovers[0] / "x.parquet").exists()
    assert store.clean_partial() == 1 and _leftovers(store) == []
    assert store.publish(_manifest(store), FRAMES).read("x").equals(FRAMES["x"])


def test_clean_partial_spares_live_writers(store: ArtifactStore) -> None:
    parent = store.artifacts_dir / "_test_double_store"
    live = parent / ArtifactStore._temp_name("k" * 20).replace(f"-{os.getpid()}-", f"-{os.getppid()}-")
    live.mkdir(parents=True)
    assert store.clean_partial() == 0 and live.exists()
    assert store.clean_partial(stale_after_s=-1) == 1 and not live.exists()


def test_losing_publisher_returns_the_winner(store: ArtifactStore) -> None:
    first = store.publish({**_manifest(store), "flow_run_id": "first"}, FRAMES)
    second = store.publish({**_manifest(store), "flow_run_id": "second"}, FRAMES)
    assert second.manifest["flow_run_id"] == "first" == first.manifest["flow_run_id"]
    assert _leftovers(store) == []
    replaced = store.publish({**_manifest(store), "flow_run_id": "forced"}, FRAMES, replace=True)
    assert replaced.manifest["flow_run_id"] == "forced" and _leftovers(store) == []


_RACER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import polars as pl
    from data_contracts.stage import Contract, Params, Stage
    from data_contracts.store import ArtifactStore
    from data_contracts.roots import open_store

    class P(Params):
        n: int = 3
        mode: str = "a"

    store = open_store(Path(sys.argv[1]))
    stage = Stage("_test_double_store", "1", (), P, {"x": Contract()}, lambda i, p, s: {})
    manifest = store.manifest(stage, "k" * 20, partition="p0", params=P(), input_keys={})
    frame = pl.DataFrame({"i": range(50_000)})
    print(store.publish(manifest, {"x": frame}).read("x").height)
    """
)


def test_concurrent_publishers_of_one_key(store: ArtifactStore) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(store.root)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0] and outs == ["50000"] * 3
    assert store.get("_test_double_store", "k" * 20) is not None and _leftovers(store) == []


def test_quarantine_keeps_validation_and_failing_rows(store: ArtifactStore) -> None:
    contract = Contract(expectations=(Expect("ExpectColumnValuesToNotBeNull", column="s"),))
    report = validate("_test_double_store", "x", FRAMES["x"], contract, "p0")
    path = store.quarantine(_manifest(store), FRAMES, {"x": report})
    assert path == store.quarantined("_test_double_store", "k" * 20)
    assert store.get("_test_double_store", "k" * 20) is None
    failing = pl.read_parquet(path / "x.failing.parquet")
    assert failing["_row"].to_list() == [2] and failing["i"].to_list() == [3]
    validation = json.loads((path / VALIDATION).read_text())
    assert validation["x"]["passed"] is False and validation["x"]["failing_rows"] == [2]
    assert [status for _, status in store.manifests()] == ["quarantined"]
    store.publish(_manifest(store), FRAMES)
    assert sorted(status for _, status in store.manifests()) == ["published", "quarantined"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), max_size=30),
       texts=st.lists(st.one_of(st.none(), st.text(max_size=8)), min_size=30, max_size=30))
def test_round_trip_is_exact_and_byte_stable(tmp_path_factory, values: list, texts: list) -> None:
    frame = pl.DataFrame({"v": values, "t": texts[: len(values)]}, schema={"v": pl.Int64, "t": pl.String})
    first = open_store(tmp_path_factory.mktemp("a")).publish(_manifest(open_store(".")), {"x": frame})
    second = open_store(tmp_path_factory.mktemp("b")).publish(_manifest(open_store(".")), {"x": frame})
    assert first.read("x").equals(frame)
    assert first.file("x").read_bytes() == second.file("x").read_bytes()


@pytest.mark.parametrize(("stage", "key"), [("../etc", "k"), ("s", "../../k"), ("s", ""), ("s", "a/b")])
def test_addresses_cannot_leave_the_store(store: ArtifactStore, stage: str, key: str) -> None:
    with pytest.raises(StageError, match="not an artifact address"):
        store.get(stage, key)

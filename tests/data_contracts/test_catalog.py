from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.stage import Contract, Params, Stage
from data_contracts.store import MANIFEST, ArtifactStore


class _TestDoubleParams(Params):
    pass


def _manifest(store: ArtifactStore, name: str, key: str, inputs: dict[str, str] | None = None) -> dict:
    declared = Stage(name, "1", tuple(inputs or ()), _TestDoubleParams, {"x": Contract()}, lambda i, p, s: {})
    return store.manifest(declared, key, partition="p0", params=_TestDoubleParams(), input_keys=inputs or {})


@pytest.fixture
def chain(tmp_path: Path) -> tuple[ArtifactStore, Catalog]:
    """Published a -> b -> c (c also reads a directly) and a quarantined d reading c."""
    store, catalog = open_store(tmp_path), Catalog(tmp_path)
    frame = {"x": pl.DataFrame({"v": [1, 2]})}
    for name, key, inputs in [("_test_double_a", "ka", {}), ("_test_double_b", "kb", {"_test_double_a": "ka"}),
                              ("_test_double_c", "kc", {"_test_double_b": "kb", "_test_double_a": "ka"})]:
        published = store.publish(_manifest(store, name, key, inputs), frame)
        catalog.record(published.manifest, "published")
    quarantined = _manifest(store, "_test_double_d", "kd", {"_test_double_c": "kc"})
    path = store.quarantine(quarantined, frame, {})
    catalog.record(json.loads((path / MANIFEST).read_text()), "quarantined")
    return store, catalog


def test_record_is_idempotent(chain) -> None:
    store, catalog = chain
    before = catalog.artifacts()
    manifest = store.get("_test_double_b", "kb").manifest
    catalog.record(manifest, "published")
    catalog.record(manifest, "published")
    after = catalog.artifacts()
    assert after.height == before.height == 4
    assert catalog.query("SELECT count(*) FROM lineage WHERE key = 'kb'").item() == 1
    assert after.filter(pl.col("key") == "kb")["rows"].item() == 2


def test_artifacts_columns_and_status(chain) -> None:
    _, catalog = chain
    table = catalog.artifacts()
    assert {"key", "stage", "version", "partition", "params", "code_version", "rows", "bytes", "status",
            "flow_run_id", "path"} <= set(table.columns)
    assert dict(table.select("key", "status").rows()) == {
        "ka": "published", "kb": "published", "kc": "published", "kd": "quarantined"}
    with pytest.raises(ValueError, match="status must be one of"):
        catalog.record({"key": "x"}, "lost")


def test_typed_questions(chain) -> None:
    _, catalog = chain
    entry = catalog.entry("kc")
    assert entry is not None and (entry.stage, entry.kind, entry.status, entry.partition, entry.rows) == (
        "_test_double_c", "data", "published", "p0", 2)
    assert entry.input_keys == {"_test_double_b": "kb", "_test_double_a": "ka"} == catalog.inputs("kc")
    assert catalog.entry("nope") is None and catalog.inputs("ka") == {}
    assert [e.key for e in catalog.entries()] == ["ka", "kb", "kc", "kd"]
    assert [e.key for e in catalog.entries(status="quarantined")] == ["kd"]
    assert catalog.entries(stage="_test_double_d", status="published") == [] == catalog.entries(kind="model")
    assert catalog.stages() == ["_test_double_a", "_test_double_b", "_test_double_c", "_test_double_d"]
    assert catalog.latest("_test_double_b") == catalog.entry("kb")
    assert catalog.latest("_test_double_d") is None  # quarantined only


def test_latest_is_the_last_recorded(chain) -> None:
    store, catalog = chain
    later = store.publish(_manifest(store, "_test_double_a", "ka2"), {"x": pl.DataFrame({"v": [3]})})
    catalog.record(later.manifest, "published")
    assert catalog.latest("_test_double_a").key == "ka2"


def test_lineage_is_recursive(chain) -> None:
    _, catalog = chain
    up = catalog.lineage("kd")
    assert up.select("input_key", "depth").sort("input_key").rows() == [("ka", 2), ("kb", 2), ("kc", 1)]
    assert up["input_status"].to_list() == ["published"] * 3
    assert catalog.lineage("ka").height == 0


def test_rebuild_from_manifests(chain, tmp_path: Path) -> None:
    store, catalog = chain
    expected = catalog.artifacts().drop("path").sort("key")
    catalog.path.unlink()
    fresh = Catalog(tmp_path)
    assert fresh.rebuild(store) == 4
    assert fresh.artifacts().drop("path").sort("key").equals(expected)
    assert fresh.lineage("kd").height == 3


_WRITER = textwrap.dedent(
    """
    import sys
    from data_contracts.catalog import Catalog
    catalog = Catalog(sys.argv[1])
    for i in range(15):
        key = f"{sys.argv[2]}_{i}"
        catalog.record({"key": key, "stage": "_test_double_w", "version": "1", "partition": "p0",
                        "input_keys": {"_test_double_a": "ka"}}, "published")
        catalog.query("SELECT count(*) FROM artifacts")
    """
)


def test_concurrent_writer_processes(tmp_path: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), f"w{n}"], stderr=subprocess.PIPE,
                              text=True) for n in range(3)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    catalog = Catalog(tmp_path)
    assert catalog.query("SELECT count(*) FROM artifacts").item() == 45
    assert catalog.query("SELECT count(*) FROM lineage").item() == 45


def test_stale_lists_other_versions_and_unknown_stages(chain) -> None:
    _, catalog = chain
    stale = catalog.stale({"_test_double_a": "1", "_test_double_b": "2", "_test_double_c": "1"})
    assert sorted(stale["key"].to_list()) == ["kb", "kd"]  # b's version moved on; d is not a known stage
    assert stale.filter(pl.col("key") == "kb")["current_version"].item() == "2"


_HOLDER = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])  # a process outside the catalog's file lock, e.g. a user's duckdb shell
    print("held", flush=True)
    time.sleep(1.0)
    con.close()
    """
)


def test_retries_while_another_process_holds_the_file(chain) -> None:
    store, catalog = chain
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(catalog.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        catalog.record(store.get("_test_double_a", "ka").manifest, "published")  # waits for the holder, then writes
    finally:
        holder.wait(timeout=30)
    assert holder.returncode == 0 and catalog.artifacts().height == 4

"""Crash safety of publishing: a writer SIGKILLed before any one filesystem step of a (re)publish leaves the old or
the new artifact published, never neither, and the next run's recovery makes the catalog agree with the disk."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from data_contracts import fsck
from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.stage import Contract, Params, Stage
from data_contracts.store import ArtifactStore

STAGE, KEY = "_test_double_crash", "c" * 20

# Publishes version VALUE of the artifact the way the runner does (store.publish, then catalog.record), killing
# itself before step number STEP, where a step is any filesystem mutation of the store or the catalog write.
_WRITER = textwrap.dedent(
    """
    import os, shutil, signal, sys
    import polars as pl
    from data_contracts import store as store_module
    from data_contracts.catalog import Catalog
    from data_contracts.stage import Contract, Params, Stage
    from data_contracts.store import ArtifactStore
    from data_contracts.roots import open_store

    root, step, value, use_exchange = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    steps = 0

    def faulty(fn):
        def wrapped(*args, **kwargs):
            global steps
            if steps == step:
                os.kill(os.getpid(), signal.SIGKILL)
            steps += 1
            return fn(*args, **kwargs)
        return wrapped

    if not use_exchange:
        store_module.exchange = lambda a, b: False
    store_module.exchange = faulty(store_module.exchange)
    for name in ("fsync_path", "_write_parquet", "_write_json"):
        setattr(store_module, name, faulty(getattr(store_module, name)))
    os.rename = faulty(os.rename)
    os.replace = faulty(os.replace)
    shutil.rmtree = faulty(shutil.rmtree)
    Catalog.record = faulty(Catalog.record)

    store, catalog = open_store(root), Catalog(root)
    stage = Stage("_test_double_crash", "1", (), Params, {"x": Contract()}, lambda i, p, s: {})
    manifest = store.manifest(stage, "c" * 20, partition="p0", params=Params(), input_keys={}, flow_run_id=f"v{value}")
    published = store.publish(manifest, {"x": pl.DataFrame({"v": [value]})}, replace=True)
    catalog.record(published.manifest, "published")
    print("steps", steps)
    """
)


def _write(root: Path, step: int, value: int, use_exchange: bool) -> int | None:
    """Run the writer; the number of steps it took when it finished, None when it was killed."""
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(root), str(step), str(value), str(int(use_exchange))],
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode == -9:
        return None
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


def _published_value(store: ArtifactStore) -> int | None:
    artifact = store.get(STAGE, KEY)
    return None if artifact is None else artifact.read("x")["v"][0]


@pytest.mark.parametrize("use_exchange", [True, False], ids=["rename-exchange", "two-step-swap"])
@pytest.mark.parametrize("first_publish", [False, True], ids=["republish", "first-publish"])
def test_kill_at_every_step_keeps_an_artifact_published(tmp_path: Path, use_exchange: bool,
                                                        first_publish: bool) -> None:
    old = None if first_publish else 1
    published_old = tmp_path / "old"  # the root as version 1 left it, copied for each step: written once
    if old is not None:
        assert _write(published_old, -1, old, use_exchange) is not None
    step = 0
    while True:
        root = tmp_path / f"step{step}"
        if old is not None:
            shutil.copytree(published_old, root)
        store, catalog = open_store(root), Catalog(root)
        finished = _write(root, step, 2, use_exchange)

        # At the instant of the kill: the old or the new artifact is published, and a reader finds it.
        assert _published_value(store) in ({old, 2} - {None} if old is not None else {None, 2}), f"step {step}"
        if old is not None:
            entry = catalog.entry(KEY)
            assert entry is not None and entry.status == "published", f"step {step}"

        # The next run finishes the swap or drops the leftovers, and reconciles the catalog.
        store.clean_partial()
        catalog.reconcile(store, [(STAGE, KEY)])
        assert store.leftovers() == [] and fsck.check(store, catalog) == [], f"step {step}"
        value = _published_value(store)
        entry = catalog.entry(KEY)
        assert ([] if entry is None else [entry.flow_run_id]) == ([] if value is None else [f"v{value}"]), f"step {step}"
        if finished is not None:
            assert value == 2 and step >= finished
            break
        step += 1
    assert step >= 6  # the writer has at least writes, fsyncs, renames and the catalog write to be killed before


def test_fsck_finds_and_repairs_every_kind_of_disagreement(tmp_path: Path) -> None:
    store, catalog = open_store(tmp_path), Catalog(tmp_path)
    stage = Stage(STAGE, "1", (), Params, {"x": Contract()}, lambda i, p, s: {})
    frames = {"x": pl.DataFrame({"v": [1]})}
    for key in ("a" * 20, "b" * 20, "d" * 20):
        published = store.publish(store.manifest(stage, key, partition="p0", params=Params(), input_keys={}), frames)
        if key != "b" * 20:
            catalog.record(published.manifest, "published")  # b: an artifact without a row
    (store.path(STAGE, "a" * 20) / "x.parquet").write_bytes(b"truncated")  # a: a broken artifact
    gone = store.manifest(stage, "e" * 20, partition="p0", params=Params(), input_keys={})
    catalog.record({**gone, "outputs": {}}, "published")  # e: a row without an artifact
    (store.artifacts_dir / STAGE / ".tmp-zzz-otherhost-1-abcd").mkdir()  # a leftover of a dead foreign writer

    kinds = sorted(problem.kind for problem in fsck.check(store, catalog))
    assert kinds == ["artifact without row", "broken artifact", "leftover", "row without artifact"]
    store.clean_partial(stale_after_s=-1)
    fsck.repair(store, catalog)
    assert fsck.check(store, catalog) == []
    assert sorted(catalog.artifacts()["key"].to_list()) == ["b" * 20, "d" * 20]


def test_catalog_paths_are_relative_so_a_moved_root_reads_its_own_files(tmp_path: Path) -> None:
    store, catalog = open_store(tmp_path / "a"), Catalog(tmp_path / "a")
    stage = Stage(STAGE, "1", (), Params, {"x": Contract()}, lambda i, p, s: {})
    published = store.publish(store.manifest(stage, KEY, partition="p0", params=Params(), input_keys={}),
                              {"x": pl.DataFrame({"v": [1]})})
    catalog.record(published.manifest, "published")
    (tmp_path / "a").rename(tmp_path / "b")
    moved = Catalog(tmp_path / "b")
    assert [entry.path for entry in moved.entries()] == [f"artifacts/{STAGE}/{KEY}"]
    assert fsck.check(open_store(tmp_path / "b"), moved) == []

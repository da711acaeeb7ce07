"""The data_refresh flow against a real Prefect server and a 2-process Dask cluster (the ``runtime`` fixture)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from flows.dag import PipelineFailed, StageFailed, _transient, materialize, refresh

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("profiles") / "test.yaml"
    path.write_text("test_double_source: {n: 5}\n")
    return str(path)


def test_stage_publishes_then_is_cached(runtime, profile: str) -> None:
    first = refresh(runtime, profile=profile, partition="pub", stages=["test_double_square"])
    assert [row["stage"] for row in first] == ["test_double_other", "test_double_source", "test_double_square"]
    assert {row["status"] for row in first} == {"published"}
    square = first[-1]
    assert square["rows"] == 5 + 2 and square["contract"] == "passed"
    artifact = open_store(runtime.root).get("test_double_square", square["key"])
    assert artifact is not None and artifact.read("numbers")["value"].to_list()[:2] == [0, 16]

    again = refresh(runtime, profile=profile, partition="pub", stages=["test_double_square"])
    assert [(row["key"], row["status"]) for row in again] == [(row["key"], "cached") for row in first]
    assert _task_states("test_double_square/pub") == ["Completed", "Cached"], "the second run is a Prefect cache hit"

    shutil.rmtree(artifact.path)  # a cache record must not stand in for files that are gone
    healed = refresh(runtime, profile=profile, partition="pub", stages=["test_double_square"])
    assert [row["status"] for row in healed] == ["cached", "cached", "published"]
    assert open_store(runtime.root).get("test_double_square", square["key"]) is not None

    from prefect.artifacts import Artifact

    table = Artifact.get("test-double-square-pub")  # the UI's record of the run: rows and contract per output
    assert table is not None and square["key"] in table.description
    assert json.loads(table.data) == [{"output": "numbers", "rows": 7, "contract": "passed"}]


def _task_states(name: str) -> list[str]:
    from prefect import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName
    from prefect.client.schemas.sorting import TaskRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=[name])),
                                     sort=TaskRunSort.EXPECTED_START_TIME_ASC)
    return [run.state.name for run in runs if run.state is not None]


def test_materialize_returns_published_artifacts(runtime, profile: str) -> None:
    artifacts = materialize(["test_double_source"], profile=profile, partition="mat", runtime=runtime,
                            overrides={"test_double_source": {"n": 3}})
    assert list(artifacts) == ["test_double_source"]
    assert artifacts["test_double_source"].read("numbers").height == 3


def test_bad_row_quarantines_and_blocks_downstream(runtime, profile: str) -> None:
    with pytest.raises(PipelineFailed) as failure:
        refresh(runtime, profile=profile, partition="bad", stages=["test_double_square"],
                overrides={"test_double_source": {"bad_row": True}})
    message = str(failure.value)
    for part in ("test_double_source", "'bad'", "ExpectColumnValuesToBeBetween", "test_double_square"):
        assert part in message
    status = {row["stage"]: row["status"] for row in failure.value.summary}
    assert status == {"test_double_other": "published", "test_double_source": "failed", "test_double_square": "blocked"}

    store = open_store(runtime.root)
    bad = next(row for row in failure.value.summary if row["stage"] == "test_double_source")
    assert bad["contract"] == "failed"
    assert store.get("test_double_source", bad["key"]) is None
    assert store.quarantined("test_double_source", bad["key"]) is not None
    assert Catalog(runtime.root).entry(bad["key"]).status == "quarantined"


@pytest.mark.parametrize(("error", "retried"), [(OSError("disk full"), True), (TimeoutError(), True),
                                                (StageFailed("contract"), False), (ValueError("bad"), False)])
def test_only_transient_errors_are_retried(error: Exception, retried: bool) -> None:
    from prefect.states import Failed

    assert _transient(None, None, Failed(data=error)) is retried


# The writer dies by SIGKILL right after its first Parquet file is on disk: no cleanup code can run.
KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import polars as pl
    from data_contracts.catalog import Catalog
    from data_contracts.runner import execute_stage
    from data_contracts.store import ArtifactStore
    from data_contracts.roots import open_store
    from flows.registry import stage_named

    write_parquet = pl.DataFrame.write_parquet

    def write_then_die(frame, *args, **kwargs):
        write_parquet(frame, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    pl.DataFrame.write_parquet = write_then_die
    root = sys.argv[1]
    execute_stage(open_store(root), Catalog(root), stage_named("test_double_source"), {"n": 5}, {}, "killed")
    """
)


def test_run_killed_mid_write_leaves_no_artifact_and_rerun_completes(runtime, profile: str) -> None:
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(runtime.root)], capture_output=True, text=True, check=False)
    assert killed.returncode == -9, killed.stderr

    stage_dir = runtime.root / "artifacts" / "test_double_source"
    partial = [path.name for path in stage_dir.glob(".tmp-*")]
    assert len(partial) == 1, "the killed writer leaves exactly its temp directory"
    store = open_store(runtime.root)
    assert not [m for m, _ in store.manifests() if m["partition"] == "killed"], "nothing was published"

    rerun = refresh(runtime, profile=profile, partition="killed", stages=["test_double_source"])
    key = rerun[0]["key"]
    assert partial[0].startswith(f".tmp-{key}-"), "the rerun publishes the key the killed run was writing"
    assert rerun[0]["status"] == "published" and store.get("test_double_source", key) is not None
    assert not list(stage_dir.glob(".tmp-*")), "the rerun removed the partial directory"


def test_a_run_reconciles_the_catalog_with_what_is_on_disk(runtime, profile: str) -> None:
    """A run killed between its rename and its catalog write left an artifact without a row; the next run, a
    Prefect cache hit that never reaches the runner, puts the row back."""
    first = refresh(runtime, profile=profile, partition="reconcile", stages=["test_double_square"])
    catalog = Catalog(runtime.root)
    key = first[-1]["key"]
    with catalog._connect(write=True) as con:
        con.execute("DELETE FROM artifacts WHERE key = ?", [key])
    assert catalog.entry(key) is None
    again = refresh(runtime, profile=profile, partition="reconcile", stages=["test_double_square"])
    assert again[-1]["status"] == "cached"
    entry = catalog.entry(key)
    assert entry is not None and (entry.status, entry.path) == ("published", f"artifacts/test_double_square/{key}")

"""Backfills through run_deployment: idempotent by key, served from the test process."""

from __future__ import annotations

import polars as pl
import pytest

from data_contracts.catalog import Catalog
from flows.backfill import BackfillError, idempotency_key, run_backfill

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_same_backfill_twice_gives_same_runs_and_unchanged_catalog(runtime, tmp_path) -> None:
    profile = tmp_path / "test.yaml"
    profile.write_text("test_double_source: {n: 4}\n")
    args = {"profile": str(profile), "serve": True, "data_dir": str(runtime.root)}

    first = run_backfill("test_double_source", ["bf-a", "bf-b"], **args)
    assert [(run.partition, run.state) for run in first] == [("bf-a", "Completed"), ("bf-b", "Completed")]
    catalog = Catalog(runtime.root)
    rows = backfilled(catalog)
    assert rows.height == 2

    second = run_backfill("test_double_source", ["bf-a", "bf-b"], **args)
    assert [run.flow_run_id for run in second] == [run.flow_run_id for run in first]
    assert backfilled(catalog).equals(rows)


def backfilled(catalog: Catalog) -> pl.DataFrame:
    """Every column of the catalog's rows of the backfilled partitions."""
    return catalog.artifacts().filter(pl.col("partition").str.starts_with("bf-")).sort("key")


def test_backfill_without_deployment_says_how_to_create_it(runtime) -> None:
    with pytest.raises(BackfillError, match="prefect --no-prompt deploy --all"):
        run_backfill("test_double_source", ["p0"])


@pytest.mark.parametrize(("a", "b"), [(("s", "p0", False, "tiny"), ("s", "p1", False, "tiny")),
                                      (("s", "p0", False, "tiny"), ("s", "p0", True, "tiny")),
                                      (("s", "p0", False, "tiny"), ("s", "p0", False, "full"))])
def test_idempotency_key_tells_runs_apart(a, b) -> None:
    assert idempotency_key(*a) == idempotency_key(*a) != idempotency_key(*b)

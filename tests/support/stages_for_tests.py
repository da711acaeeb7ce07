"""Test-double stages for the flow tests: tiny, deterministic, importable by Dask worker processes.

Registered through ``GYMFORGE_STAGE_MODULES=stages_for_tests`` (set in ``conftest.py``), so every worker imports
them too. Names carry the ``test_double_`` prefix so nobody mistakes them for pipeline stages.
"""

from __future__ import annotations

import polars as pl
from pydantic import Field

from data_contracts.stage import Contract, Expect, Params, stage


class SourceParams(Params):
    n: int = Field(8, description="rows to generate")
    bad_row: bool = Field(False, description="plant one negative value, which the contract rejects")


NUMBERS = Contract(
    columns={"i": pl.Int64, "value": pl.Int64},
    expectations=(Expect("ExpectColumnValuesToBeBetween", column="value", min_value=0),),
    min_rows=1,
)


@stage(name="test_double_source", version="1", params=SourceParams, outputs={"numbers": NUMBERS})
def source(inputs, params: SourceParams, partition: str) -> dict[str, pl.DataFrame]:
    """Rows i = 0..n-1 with value = i * (1 + len(partition)); one negative value when ``bad_row``."""
    values = [i * (1 + len(partition)) for i in range(params.n)]
    if params.bad_row:
        values[-1] = -1
    return {"numbers": pl.DataFrame({"i": range(params.n), "value": values}, schema={"i": pl.Int64, "value": pl.Int64})}


class EmptyParams(Params):
    pass


@stage(name="test_double_other", version="1", params=EmptyParams, outputs={"numbers": NUMBERS})
def other(inputs, params: EmptyParams, partition: str) -> dict[str, pl.DataFrame]:
    """An independent source: runs in parallel with ``test_double_source``."""
    return {"numbers": pl.DataFrame({"i": [0, 1], "value": [7, 8]}, schema={"i": pl.Int64, "value": pl.Int64})}


@stage(
    name="test_double_square",
    version="1",
    params=EmptyParams,
    inputs=("test_double_source", "test_double_other"),
    outputs={"numbers": NUMBERS},
)
def square(inputs, params: EmptyParams, partition: str) -> dict[str, pl.DataFrame]:
    """Squares of both inputs' values, concatenated."""
    frames = [inputs[name].read("numbers") for name in ("test_double_source", "test_double_other")]
    return {"numbers": pl.concat(frames).with_columns(pl.col("value") ** 2)}

"""A CPU-bound stage for the Dask scaling benchmark (a benchmark double, registered only when
``GYMFORGE_STAGE_MODULES`` names this module, never part of the pipeline)."""

from __future__ import annotations

import hashlib

import polars as pl
from pydantic import Field

from data_contracts.stage import Contract, Params, stage


class BurnParams(Params):
    rounds: int = Field(400_000, ge=1, description="blake2b rounds per partition: pure-Python, GIL-bound work")


@stage(
    name="bench_cpu_burn",
    version="1",
    params=BurnParams,
    outputs={"digest": Contract(columns={"partition": pl.String, "digest": pl.String}, min_rows=1)},
)
def burn(inputs, params: BurnParams, partition: str) -> dict[str, pl.DataFrame]:
    """Chain ``rounds`` blake2b hashes seeded by the partition name; one row with the final digest."""
    digest = partition.encode()
    for _ in range(params.rounds):
        digest = hashlib.blake2b(digest, digest_size=16).digest()
    return {"digest": pl.DataFrame({"partition": [partition], "digest": [digest.hex()]})}

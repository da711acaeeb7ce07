"""A test-double stage for the cluster tests: it leaves a marker naming the worker process that runs it, then takes
its time, so a test can kill that worker mid-task. Registered like ``stages_for_tests`` (``GYMFORGE_STAGE_MODULES``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import polars as pl
from pydantic import Field
from stages_for_tests import NUMBERS

from data_contracts.stage import Params, stage


class SlowParams(Params):
    seconds: float = Field(6.0, description="how long the stage runs after leaving its marker")
    marker_dir: str = Field("", description="directory for one marker file per attempt, named by the worker's pid")


@stage(name="test_double_slow", version="1", params=SlowParams, outputs={"numbers": NUMBERS})
def slow(inputs, params: SlowParams, partition: str) -> dict[str, pl.DataFrame]:
    """Two rows after ``seconds``; each attempt leaves ``<marker_dir>/<pid>``."""
    if params.marker_dir:
        Path(params.marker_dir, str(os.getpid())).touch()
    time.sleep(params.seconds)
    return {"numbers": pl.DataFrame({"i": [0, 1], "value": [1, 2]}, schema={"i": pl.Int64, "value": pl.Int64})}

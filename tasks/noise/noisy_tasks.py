"""Stage `noisy_tasks`: the noise curriculum's training tasks, a verified noisy twin of every environment task at each
level 1..L (LongCat-Flash-Thinking-2601 section 3.3.3; the procedure is tasks/noise/twins.py)."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from data_contracts.schemas import NOISE_REJECTED, NOISY_TASK
from data_contracts.stage import REJECTED, Artifact, stage
from tasks.noise.twins import NoiseParams, build_twins, twins_contract


@stage(name="noisy_tasks", version="1", params=NoiseParams, inputs=("environments",),
       outputs={"tasks": twins_contract(NOISY_TASK), REJECTED: NOISE_REJECTED.contract()})
def noisy_tasks(inputs: Mapping[str, Artifact], params: NoiseParams, partition: str) -> dict[str, pl.DataFrame]:
    """Noisy training twins of every environment task at each curriculum level, verified solvable by execution."""
    source = inputs["environments"]
    kept, rejected = build_twins(source.read("environments"), source.read("tasks"), params, "noisy_tasks",
                                 partition, NOISY_TASK)
    return {"tasks": kept, REJECTED: rejected}

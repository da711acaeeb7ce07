"""Stage `midtrain_decompose`: tool-decomposition augmentation (LongCat-Flash-Thinking-2601 section 2, "Tool
Decomposition Augmentation"; the procedure is ``envgen.midtrain.augment.decompose``): values the user gives are
progressively hidden in the environment state, so the agent must first look each up with another tool; the new
episode is played and re-verified by execution, and how many values were hidden is recorded."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from pydantic import Field

from data_contracts.schemas import ITEM_REJECTED
from data_contracts.stage import REJECTED, Artifact, stage
from envgen.midtrain.augment import decompose
from tasks.trajectories import EpisodeParams, augment, trajectory_contract

STAGE = "midtrain_decompose"
TRANSFORM = "decompose"


class DecomposeParams(EpisodeParams):
    max_hidden: int = Field(2, ge=1, le=6, description="most values hidden per trajectory (one lookup each)")


# 4: compact tool schemas and results; one acting customer per task, identified first; no read without a
# reason; reasons, alternatives and the outcome stated in words that are true
@stage(name=STAGE, version="4", params=DecomposeParams, inputs=("midtrain_env", "tokenizer"),
       outputs={"trajectories": trajectory_contract([TRANSFORM]), REJECTED: ITEM_REJECTED.contract()})
def midtrain_decompose(inputs: Mapping[str, Artifact], params: DecomposeParams,
                       partition: str) -> dict[str, pl.DataFrame]:
    """Tool decomposition of every verified environment trajectory: hidden values looked up with another tool."""

    def hide(episode, rng):
        new, hidden = decompose(episode, rng, params.max_hidden)
        return new, {"hidden": len(hidden), "values": hidden}

    return augment(inputs["midtrain_env"].read("trajectories"), params, partition, STAGE, TRANSFORM, hide, inputs)

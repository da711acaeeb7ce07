"""Stage `midtrain_reason`: reasoning decomposition / multi-step decision enrichment (LongCat-Flash-Thinking-2601
section 2; the procedure is ``envgen.midtrain.augment.alternatives``): at each action the reasoning compares
alternative candidates (a neighbouring tool of the graph, a wrong row, a missing argument) and chooses the executed
one. The executed actions are unchanged, and the conversation is re-verified by execution."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from pydantic import Field

from data_contracts.schemas import ITEM_REJECTED
from data_contracts.stage import REJECTED, Artifact, stage
from envgen.midtrain.augment import alternatives
from tasks.trajectories import EpisodeParams, augment, trajectory_contract

STAGE = "midtrain_reason"
TRANSFORM = "reason"


class ReasonParams(EpisodeParams):
    candidates_per_step: int = Field(2, ge=1, le=3, description="alternative candidates compared at each action")


# 2: compact tool schemas and results; one acting customer per task, identified first; no read without a
# reason; reasons, alternatives and the outcome stated in words that are true
@stage(name=STAGE, version="2", params=ReasonParams, inputs=("midtrain_env", "tokenizer"),
       outputs={"trajectories": trajectory_contract([TRANSFORM]), REJECTED: ITEM_REJECTED.contract()})
def midtrain_reason(inputs: Mapping[str, Artifact], params: ReasonParams, partition: str) -> dict[str, pl.DataFrame]:
    """Alternative candidates compared before every executed action of each verified environment trajectory."""

    def enrich(episode, rng):
        new, steps = alternatives(episode, rng, params.candidates_per_step)
        return new, {"candidates_per_step": params.candidates_per_step, "steps": steps}

    return augment(inputs["midtrain_env"].read("trajectories"), params, partition, STAGE, TRANSFORM, enrich, inputs)

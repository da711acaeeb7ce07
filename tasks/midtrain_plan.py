"""Stage `midtrain_plan`: planning-oriented augmentation (LongCat-Flash-Thinking-2601 section 2, "Problem
decomposition trajectories"; the procedure is ``envgen.midtrain.augment.plan``): a plan of sub-goals derived from
the calls' dependency structure (one per write, the reads that feed it, which earlier step each uses) before the
correct first action; the conversation is re-verified by execution."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from data_contracts.schemas import ITEM_REJECTED
from data_contracts.stage import REJECTED, Artifact, stage
from envgen.midtrain.augment import plan
from tasks.trajectories import EpisodeParams, augment, trajectory_contract

STAGE = "midtrain_plan"
TRANSFORM = "plan"


class PlanParams(EpisodeParams):
    """midtrain_plan takes the params of every episode route."""


# 2: compact tool schemas and results; one acting customer per task, identified first; no read without a
# reason; reasons, alternatives and the outcome stated in words that are true
@stage(name=STAGE, version="2", params=PlanParams, inputs=("midtrain_env", "tokenizer"),
       outputs={"trajectories": trajectory_contract([TRANSFORM]), REJECTED: ITEM_REJECTED.contract()})
def midtrain_plan(inputs: Mapping[str, Artifact], params: PlanParams, partition: str) -> dict[str, pl.DataFrame]:
    """A plan of sub-goals before the first action of each verified environment trajectory."""

    def with_plan(episode, rng):
        new, subgoals = plan(episode)
        return new, {"subgoals": len(subgoals), "plan": subgoals}

    return augment(inputs["midtrain_env"].read("trajectories"), params, partition, STAGE, TRANSFORM, with_plan,
                   inputs)

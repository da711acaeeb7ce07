"""Stage `qa_filtered`: QA seeds a reference policy answers correctly on some but not all of k samples (LoongRL
section 3.1, stage 2; the keep decision is tasks/difficulty.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, stage
from envgen.rewards import get_reward, normalize
from inference.agent import QA_PROMPT_TOKENS, AgentConfig, qa_prompt_items, rollout_prompts
from inference.engine import Engine
from tasks.difficulty import (
    FilterParams,
    cap_per_answer,
    filter_outputs,
    pass_count_figure,
    split_by_window,
    with_engine,
)
from tasks.longctx.qa_seeds import ANSWER_SHARE, share_cap
from tasks.longctx.records import FILTERED_SEED, FILTERED_SEED_REJECTED


class QAFilterParams(FilterParams):
    batch_size: int = Field(32, gt=0, description="items per engine call (each item asks for k samples)")
    reward: str = Field("two_way", description="reward function of envgen/rewards.py REWARDS scoring an answer")
    max_prompt_tokens: int = Field(
        QA_PROMPT_TOKENS, gt=0, description="documents are cut (by characters, ~4 per token) so the prompt stays short"
    )
    max_per_answer: int | None = Field(
        None, ge=1, description="keep at most this many seeds per answer (the rest rejected as answer_over_cap), "
        "so guessing the commonest answer stops paying; None caps only at the answer share (no answer over 5% "
        "of the kept seeds, always applied)",
    )


def filter_qa(seeds: pl.DataFrame, engine: Engine, params: QAFilterParams) -> dict[str, pl.DataFrame]:
    """Score every seed with ``k`` samples of ``engine`` and split by the pass-count window."""
    config = AgentConfig(sampling=params.sampling(), seed=params.seed)
    groups = rollout_prompts(engine, qa_prompt_items(seeds, params.max_prompt_tokens), params.k, get_reward(params.reward),
                             config, source="qa_filtered", batch_size=params.batch_size)
    pass_counts = [sum(t.verified for t in group) for group in groups]
    outputs = split_by_window(seeds, pass_counts, params, kept="seeds")
    # The filter keeps what the reference gets right, and a reference that guesses gets the common answers right:
    # the share is capped after filtering, whatever the seeds held.
    cap = share_cap(Counter(normalize(a) for a in outputs["seeds"]["answer"]).values(), params.max_per_answer)
    outputs["seeds"], outputs[REJECTED] = cap_per_answer(outputs["seeds"], outputs[REJECTED], cap)
    return outputs


@stage(
    name="qa_filtered",
    # 3: the two-way reward accepts a descriptor beside the answer ("the river Thames"); 4: an optional cap of kept
    # seeds per answer; 5: no answer over 5% of the kept seeds (the answer_share check); a type word after the name
    # is accepted ("the Danube river")
    version="5",
    inputs=("qa_seeds", "tiny_policy"),
    params=QAFilterParams,
    outputs=filter_outputs("seeds", FILTERED_SEED, FILTERED_SEED_REJECTED, checks=(ANSWER_SHARE,)),
    figure=pass_count_figure,
)
def qa_filtered(inputs: Mapping[str, Artifact], params: QAFilterParams, partition: str) -> dict[str, pl.DataFrame]:
    """QA seeds a reference policy answers correctly on some but not all of k samples (LoongRL section 3.1)."""
    seeds = inputs["qa_seeds"].read("seeds")
    return with_engine(params, inputs, lambda engine: filter_qa(seeds, engine, params))

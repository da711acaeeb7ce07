"""Stage `midtrain_plan`: planning-oriented augmentation (LongCat-Flash-Thinking-2601 section 2, "Problem
decomposition trajectories"; the procedure is ``plan`` below): a plan of sub-goals derived from
the calls' dependency structure (one per write, the reads that feed it, which earlier step each uses) before the
correct first action; the conversation is re-verified by execution."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace

import polars as pl

from data_contracts.stage import REJECTED, Artifact, stage
from envgen.environment import domain_for
from envgen.trajectory_standard import VARIED_SENTENCES
from tasks.midtrain.synth import ReferenceEpisode
from tasks.midtrain.trajectory_stages import EpisodeParams, augment, trajectory_contract
from tasks.midtrain.words import fill
from tasks.records import ITEM_REJECTED

STAGE = "midtrain_plan"
TRANSFORM = "plan"


HEADERS = ("Plan:", "Here is my plan.", "The steps I will take:", "How I will go about it:", "My plan, step by step:")
GOAL = ("{n}. {What}: {steps}{after}.", "{n}. To {what}, I call {steps}{after}.",
        "{n}. First {steps}{after}, so I can {what}.", "{n}. For the goal to {what}: {steps}{after}.")
AFTER = (" (uses what step {deps} finds)", ", with what step {deps} returns", " (building on step {deps})")
THEN = (", then ", " and then ", ", after that ")
FIRST = ("First step: {tool}.", "I begin with {tool}.", "Starting with {tool}.", "So {tool} comes first.",
         "The first call is {tool}.")


def plan(ep: ReferenceEpisode, rng: random.Random) -> tuple[ReferenceEpisode, list[str]]:
    """A plan of sub-goals (one per write, with the reads that feed it, and which earlier step each depends on)
    placed before the first action (LongCat-Flash-Thinking-2601 2, "Problem decomposition trajectories")."""
    domain = domain_for(ep.env)
    goals: list[list[int]] = [[]]
    for k, call in enumerate(ep.calls):
        goals[-1].append(k)
        if domain.tools[call["name"]].is_write and k < len(ep.calls) - 1:
            goals.append([])
    goals = [g for g in goals if g]
    owner = {k: i for i, g in enumerate(goals) for k in g}
    lines = []
    for i, goal in enumerate(goals):
        steps = rng.choice(THEN).join(ep.calls[k]["name"] for k in goal)
        deps = sorted({owner[j] + 1 for k in goal for j in range(k) if owner[j] != i
                       and domain.graph.has_edge(ep.calls[j]["name"], ep.calls[k]["name"])})
        after = fill(rng.choice(AFTER), deps=", ".join(map(str, deps))) if deps else ""
        write = next((ep.calls[k] for k in goal if domain.tools[ep.calls[k]["name"]].is_write), None)
        what = domain.tools[write["name"]].description.split(". ")[0].rstrip(".").lower() if write else "check records"
        lines.append(fill(rng.choice(GOAL), n=str(i + 1), what=what, steps=steps, after=after))
    text = "\n".join([rng.choice(HEADERS), *lines, fill(rng.choice(FIRST), tool=ep.calls[0]["name"])])
    return replace(ep, plan=text), lines


class PlanParams(EpisodeParams):
    """midtrain_plan takes the params of every episode route."""


# 2: compact tool schemas and results; one acting customer per task, identified first; no read without a
# reason; reasons, alternatives and the outcome stated in words that are true
# 3: the trajectory standard; plans and every move in varied words
# 4: a refusal row stays a refusal; a plan line never capitalizes a tool name
@stage(name=STAGE, version="4", params=PlanParams, inputs=("midtrain_env", "tokenizer"),
       outputs={"trajectories": trajectory_contract([TRANSFORM], checks=(VARIED_SENTENCES,)), REJECTED: ITEM_REJECTED.contract()})
def midtrain_plan(inputs: Mapping[str, Artifact], params: PlanParams, partition: str) -> dict[str, pl.DataFrame]:
    """A plan of sub-goals before the first action of each verified environment trajectory."""

    def with_plan(episode, rng):
        new, subgoals = plan(episode, rng)
        return new, {"subgoals": len(subgoals), "plan": subgoals}

    return augment(inputs["midtrain_env"].read("trajectories"), params, partition, STAGE, TRANSFORM, with_plan,
                   inputs)

"""Stage `midtrain_reason`: reasoning decomposition / multi-step decision enrichment (LongCat-Flash-Thinking-2601
section 2; the procedure is ``alternatives`` below): at each action the reasoning compares
alternative candidates (a neighbouring tool of the graph, a wrong row, a missing argument) and chooses the executed
one. The executed actions are unchanged, and the conversation is re-verified by execution."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import polars as pl
from pydantic import Field
from sqlalchemy import select

from data_contracts.schemas import ITEM_REJECTED
from data_contracts.stage import REJECTED, Artifact, stage
from envgen.compiler import CompiledDomain, Tool
from envgen.customers import owner_of
from envgen.runtime import domain_for
from envgen.seeding import engine_from_bytes
from envgen.taskgen import render_value
from tasks.midtrain.routes import EpisodeParams, augment, trajectory_contract
from tasks.midtrain.synth import Episode, Unusable

STAGE = "midtrain_reason"
TRANSFORM = "reason"


def _other_row(domain: CompiledDomain, env: dict[str, Any], tool: Tool, args: dict[str, Any]) -> str | None:
    """Another key of the tool's target entity: a plausible wrong row."""
    entity = domain.spec.entity(tool.entity)
    if entity.key not in args:
        return None
    table = domain.tables[entity.name]
    engine = engine_from_bytes(bytes(env["db"]))
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(table.c[entity.key]).where(table.c[entity.key] != args[entity.key]).limit(3))
            keys = [r[0] for r in rows]
    finally:
        engine.dispose()
    return keys[0] if keys else None


def _why_not(alt: Tool, tool: Tool, call: dict[str, Any]) -> str:
    """A reason that is true of the neighbouring tool ``alt`` against the executed ``tool``: it writes where this
    step reads, does another write, reads another entity, needs an input this step does not have, or answers
    another question about the same entity."""
    if alt.is_write and not tool.is_write:
        return "it would change the records before I have checked them"
    if alt.is_write:
        return f"it does something else ({alt.description.split('. ')[0].lower()}), not what you asked"
    if alt.entity != tool.entity:
        return f"it returns {alt.entity.replace('_', ' ')} records, and this step needs the " \
               f"{tool.entity.replace('_', ' ')}"
    inputs = sorted(p.name for p in alt.params if p.required and p.name not in call["arguments"])
    if inputs:
        return f"it takes the {' and '.join(i.replace('_', ' ') for i in inputs)}, which I do not have"
    return f"it answers another question ({alt.description.split('. ')[0].lower().rstrip('.')})"


def _other_row_reason(domain: CompiledDomain, env: dict[str, Any], tool: Tool, wrong: Any, right: Any) -> str:
    """Why the other row is wrong, true of it: it belongs to another customer, or it is simply not the one named."""
    entity = tool.entity.replace("_", " ")
    engine = engine_from_bytes(bytes(env["db"]))
    try:
        with engine.connect() as conn:
            theirs, ours = owner_of(domain, conn, tool.entity, wrong), owner_of(domain, conn, tool.entity, right)
    finally:
        engine.dispose()
    if theirs is not None and theirs != ours:
        return f"that {entity} belongs to another customer; yours is {render_value(right)}"
    return f"that is another {entity}; the one we need is {render_value(right)}"


def alternatives(ep: Episode, rng: random.Random, per_step: int) -> tuple[Episode, list[dict[str, Any]]]:
    """Notes comparing ``per_step`` alternative candidates with each executed call (LongCat-Flash-Thinking-2601 2,
    "Reasoning Decomposition" / "Multi-step decision-making enrichment"); the executed calls are unchanged."""
    domain = domain_for(ep.env)
    env_tools = set(ep.env["tool_names"])
    notes, recorded = {}, []
    for k, call in enumerate(ep.calls):
        tool = domain.tools[call["name"]]
        options: list[tuple[str, str]] = []
        near = sorted((set(domain.graph.predecessors(tool.name)) | set(domain.graph.successors(tool.name))
                       | {n for n in env_tools if domain.tools[n].entity == tool.entity}) & env_tools - {tool.name})
        if near:
            alt = domain.tools[rng.choice(near)]
            options.append(("neighbouring tool", f"{alt.name}: no, {_why_not(alt, tool, call)}"))
        wrong = _other_row(domain, ep.env, tool, call["arguments"])
        if wrong is not None:
            key = domain.spec.entity(tool.entity).key
            options.append(("wrong row", (f"{tool.name} with {key.replace('_', ' ')} {wrong}: no, "
                                         f"{_other_row_reason(domain, ep.env, tool, wrong, call['arguments'][key])}")))
        required = [p.name for p in tool.params if p.required]
        if required:
            drop = rng.choice(required)
            options.append(("missing argument", (f"{tool.name} without {drop.replace('_', ' ')}: no, the call is "
                                                f"invalid, {drop} is required")))
        rng.shuffle(options)
        chosen = options[:per_step]
        if not chosen:
            continue
        lines = [f"{i}. {text}" for i, (_, text) in enumerate(chosen, start=1)]
        notes[k] = "Options I considered:\n" + "\n".join(lines) + f"\n{len(lines) + 1}. {tool.name}: yes."
        recorded.append({"call": k, "kinds": [kind for kind, _ in chosen]})
    if not notes:
        raise Unusable("reason: no step has an alternative to compare")
    return Episode(ep.env, ep.task, ep.calls, notes=notes), recorded


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

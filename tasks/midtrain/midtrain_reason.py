"""Stage `midtrain_reason`: reasoning decomposition / multi-step decision enrichment (LongCat-Flash-Thinking-2601
section 2; the procedure is ``alternatives`` below): at each action the reasoning compares alternative candidates
the conversation offers (another offered tool, a row of the same entity an earlier result showed, the call without
a required argument), each rejected for a reason true of it, and chooses the executed one. The executed actions are
unchanged, and the conversation is re-verified by execution."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, stage
from envgen.compiler import CompiledDomain, Tool
from envgen.customers import owner_of
from envgen.environment import domain_for
from envgen.seeding import engine_from_bytes
from envgen.small import DISTRACTORS, task_tools
from envgen.tools import render_value
from envgen.trajectory_checks import value_texts_in
from envgen.trajectory_standard import VARIED_SENTENCES
from tasks.midtrain.synth import ReferenceEpisode, Unusable, call_results
from tasks.midtrain.trajectory_stages import EpisodeParams, augment, trajectory_contract
from tasks.midtrain.words import fill
from tasks.records import ITEM_REJECTED

STAGE = "midtrain_reason"
TRANSFORM = "reason"


HEADERS = ("Options I considered:", "What else I could do here:", "Alternatives I weighed:", "Other candidates:",
           "Before choosing, the options:", "Candidates for this step:", "I compared these:", "Possible calls:")
REJECT = ("no, {why}", "not this one: {why}", "rejected, since {why}", "ruled out, because {why}", "{why}",
          "skip it; {why}")
CHOOSE = ("So I call {tool}.", "{tool} is the one to call.", "The right call here is {tool}.",
          "That leaves {tool}, which fits.", "I go with {tool}.", "Hence {tool}.")
WHY = {
    "writes_first": ("it would change the records before I have checked them",
                     "it writes, and this step only reads",
                     "calling it now would alter data too early"),
    "other_write": ("it does something else ({what}), not what you asked",
                    "its job is to {what}, which you did not ask for",
                    "you asked for something other than to {what}"),
    "other_entity": ("it returns {alt} records, and this step needs the {entity}",
                     "{alt} records are not what this step is after; it needs the {entity}",
                     "this step is about the {entity}, not {alt} records"),
    "needs": ("it needs the {inputs} as input; this step has the {given}",
              "its input is the {inputs}, while this step starts from the {given}",
              "it asks for the {inputs}, and what this step holds is the {given}"),
    "other_question": ("it answers another question ({what})",
                       "it is for a different question: {what}",
                       "what it tells is another matter ({what})"),
    "missing": ("the call is invalid, {drop} is required",
                "{drop} is required, so the tool would refuse it",
                "without {drop} the call fails",
                "a call lacking {drop} is invalid"),
    "other_customer": ("that {entity} belongs to another customer; yours is {right}",
                       "it is another customer's {entity}, and yours is {right}",
                       "another customer holds that {entity}; yours is {right}"),
    "other_row": ("that is another {entity}; the one we need is {right}",
                  "the {entity} to act on is {right}, not this one",
                  "{right} is the {entity} in question, not that one"),
}
"""Reasons by kind, several phrasings each; every ownership claim says "another customer", which the trajectory
standard checks against the database."""


def _clause(text: str) -> str:
    return text.split(". ")[0].lower().rstrip(".")


def _why_not(alt: Tool, tool: Tool, call: dict[str, Any], rng: random.Random) -> str:
    """A reason that is true of the neighbouring tool ``alt`` against the executed ``tool``: it writes where this
    step reads, does another write, reads another entity, needs an input this step does not have, or answers
    another question about the same entity."""
    if alt.is_write and not tool.is_write:
        return rng.choice(WHY["writes_first"])
    if alt.is_write:
        return fill(rng.choice(WHY["other_write"]), what=_clause(alt.description))
    if alt.entity != tool.entity:
        return fill(rng.choice(WHY["other_entity"]), alt=alt.entity.replace("_", " "),
                    entity=tool.entity.replace("_", " "))
    inputs = sorted(p.name for p in alt.params if p.required and p.name not in call["arguments"])
    if inputs:
        given = " and ".join(a.replace("_", " ") for a in call["arguments"]) or "no input"
        return fill(rng.choice(WHY["needs"]), inputs=" and ".join(i.replace("_", " ") for i in inputs), given=given)
    return fill(rng.choice(WHY["other_question"]), what=_clause(alt.description))


def _seen_rows(domain: CompiledDomain, ep: ReferenceEpisode, k: int, results: list[str]) -> list[str]:
    """Keys of the entity call ``k`` acts on that the conversation shows before it (the request, the facts the
    user is asked for, earlier results), other than the one the call takes: the rows it could confuse."""
    tool = domain.tools[ep.calls[k]["name"]]
    key = domain.spec.entity(tool.entity).key
    chosen = ep.calls[k]["arguments"].get(key)
    if chosen is None:
        return []
    shown = set()
    for result in results[:k]:
        shown |= value_texts_in(result, key)
    return sorted(shown - {render_value(chosen)})


def _other_row_reason(domain: CompiledDomain, env: dict[str, Any], tool: Tool, wrong: Any, right: Any,
                      rng: random.Random) -> str:
    """Why the other row is wrong, true of it: it belongs to another customer, or it is simply not the one named."""
    engine = engine_from_bytes(bytes(env["db"]))
    try:
        with engine.connect() as conn:
            theirs, ours = owner_of(domain, conn, tool.entity, wrong), owner_of(domain, conn, tool.entity, right)
    finally:
        engine.dispose()
    kind = "other_customer" if theirs is not None and theirs != ours else "other_row"
    return fill(rng.choice(WHY[kind]), entity=tool.entity.replace("_", " "), right=render_value(right))


def alternatives(ep: ReferenceEpisode, rng: random.Random, per_step: int,
                 distractors: int = DISTRACTORS) -> tuple[ReferenceEpisode, list[dict[str, Any]]]:
    """Notes comparing ``per_step`` alternative candidates with each executed call (LongCat-Flash-Thinking-2601 2,
    "Reasoning Decomposition" / "Multi-step decision-making enrichment"); the executed calls are unchanged.

    The candidates come from the conversation: another of the tools the row offers (the executed calls' tools and
    ``distractors`` graph neighbours), a row of the same entity an earlier result showed, or the call without a
    required argument; each is rejected for a reason true of it."""
    domain = domain_for(ep.env)
    offered = tuple(t["function"]["name"] for t in task_tools(ep.env, [c["name"] for c in ep.calls], distractors, rng))
    results = call_results(domain, bytes(ep.env["db"]), ep.calls)
    notes, recorded = {}, []
    for k, call in enumerate(ep.calls):
        tool = domain.tools[call["name"]]
        options: list[tuple[str, str]] = []
        near = sorted(set(offered) - {tool.name})
        if near:
            alt = domain.tools[rng.choice(near)]
            why = _why_not(alt, tool, call, rng)
            options.append(("neighbouring tool", f"{alt.name}: {fill(rng.choice(REJECT), why=why)}"))
        if seen := _seen_rows(domain, ep, k, results):
            key = domain.spec.entity(tool.entity).key
            wrong = rng.choice(seen)
            why = _other_row_reason(domain, ep.env, tool, wrong, call["arguments"][key], rng)
            options.append(("wrong row", (f"{tool.name} with {key.replace('_', ' ')} {wrong}: "
                                         f"{fill(rng.choice(REJECT), why=why)}")))
        required = [p.name for p in tool.params if p.required]
        if required:
            drop = rng.choice(required)
            why = fill(rng.choice(WHY["missing"]), drop=drop)
            options.append(("missing argument", (f"{tool.name} without {drop.replace('_', ' ')}: "
                                                f"{fill(rng.choice(REJECT), why=why)}")))
        rng.shuffle(options)
        chosen = options[:per_step]
        if not chosen:
            continue
        lines = [f"{i}. {text}" for i, (_, text) in enumerate(chosen, start=1)]
        notes[k] = "\n".join([rng.choice(HEADERS), *lines, fill(rng.choice(CHOOSE), tool=tool.name)])
        recorded.append({"call": k, "kinds": [kind for kind, _ in chosen]})
    if not notes:
        raise Unusable("reason: no step has an alternative to compare")
    return replace(ep, notes=notes, offered=offered), recorded


class ReasonParams(EpisodeParams):
    candidates_per_step: int = Field(2, ge=1, le=3, description="alternative candidates compared at each action")


# 2: compact tool schemas and results; one acting customer per task, identified first; no read without a
# reason; reasons, alternatives and the outcome stated in words that are true
# 3: candidates from the conversation (offered tools, rows seen earlier); the trajectory standard; varied words
# 4: a refusal row stays a refusal
@stage(name=STAGE, version="4", params=ReasonParams, inputs=("midtrain_env", "tokenizer"),
       outputs={"trajectories": trajectory_contract([TRANSFORM], checks=(VARIED_SENTENCES,)), REJECTED: ITEM_REJECTED.contract()})
def midtrain_reason(inputs: Mapping[str, Artifact], params: ReasonParams, partition: str) -> dict[str, pl.DataFrame]:
    """Alternative candidates compared before every executed action of each verified environment trajectory."""

    def enrich(episode, rng):
        new, steps = alternatives(episode, rng, params.candidates_per_step, params.distractor_tools)
        return new, {"candidates_per_step": params.candidates_per_step, "steps": steps}

    return augment(inputs["midtrain_env"].read("trajectories"), params, partition, STAGE, TRANSFORM, enrich, inputs)

"""Stage `midtrain_decompose`: tool-decomposition augmentation (LongCat-Flash-Thinking-2601 section 2, "Tool
Decomposition Augmentation"; the procedure is ``decompose`` below): values the user gives are
progressively hidden in the environment state, so the agent must first look each up with another tool; the new
episode is played and re-verified by execution, and how many values were hidden is recorded."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import polars as pl
from pydantic import Field
from sqlalchemy import select

from data_contracts.stage import REJECTED, Artifact, stage
from envgen.compiler import CompiledDomain, Tool, sem_type
from envgen.construct import user_knowable
from envgen.environment import domain_for, json_field
from envgen.seeding import engine_from_bytes
from envgen.tools import Executor, call_tool, render_value
from envgen.trajectory_checks import needless_reads, value_texts
from envgen.trajectory_standard import VARIED_SENTENCES
from tasks.midtrain.synth import ReferenceEpisode, Unusable, call_results, said_before
from tasks.midtrain.trajectory_stages import EpisodeParams, augment, trajectory_contract
from tasks.records import ITEM_REJECTED

STAGE = "midtrain_decompose"
TRANSFORM = "decompose"

LOOKUP_KINDS = ("get", "lookup", "find", "list_by")


def _hideable(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Facts the user gives (the ones decomposition may hide): stated in the request with their own sentence, or
    not in the request at all, so the agent would ask for them."""
    text = str(task["description"])
    return [f for f in json_field(task["user_profile"])["facts"]
            if "." not in f["name"] and (f" My {f['label']} is {f['value']}." in text or f["value"] not in text)]


def _hide(task: dict[str, Any], fact: dict[str, Any]) -> dict[str, Any] | None:
    """The task without ``fact``: its sentence gone from the request and the fact gone from the profile; None when
    the value could still be read elsewhere (inside the intent, or another profile fact the user would state)."""
    text = str(task["description"]).replace(f" My {fact['label']} is {fact['value']}.", "")
    if fact["value"] in text:
        return None
    profile = json_field(task["user_profile"])
    facts = [f for f in profile["facts"] if f is not fact and f != fact]
    if any(fact["value"] in str(f["value"]) for f in facts):
        return None
    return {**task, "description": text, "user_profile": json.dumps({**profile, "facts": facts})}


def _lookup(domain: CompiledDomain, env: dict[str, Any], prefix: list[dict[str, Any]], param_sem: str, value: str,
            known: str, exclude: set[str]) -> tuple[dict[str, Any], dict[str, str] | None] | None:
    """A read call, run after the ``prefix`` calls, whose result holds ``value`` as its only value of semantic type
    ``param_sem`` (so the agent can tell it is the one), and whose arguments are known (in ``known`` or an earlier
    result) or are something a user knows of that row (an email, a name: returned as the new fact the user states
    instead); None when the environment has none."""
    engine = engine_from_bytes(bytes(env["db"]))
    ex = Executor(domain)
    try:
        for call in prefix:
            known += json.dumps(call_tool(ex, engine.begin, call["name"], call["arguments"], domain.spec.now).content)
        for name in sorted(env["tool_names"]):
            tool = domain.tools[name]
            if tool.is_write or name in exclude or param_sem not in tool.outputs or tool.kind not in LOOKUP_KINDS:
                continue
            for args in _candidate_args(domain, engine, tool, param_sem, value):
                fact = None
                if not all(any(t in known for t in value_texts(v)) for v in args.values()):
                    if tool.kind not in ("lookup", "find") or not user_knowable(domain, tool):
                        continue
                    field = domain.spec.entity(tool.entity).field(tool.column)
                    label = (field.label if field is not None and field.label else tool.column.replace("_", " "))
                    fact = {"name": tool.column, "label": label, "value": render_value(args[tool.column])}
                result = call_tool(ex, engine.begin, name, args, domain.spec.now)
                if result.ok and _only_value(domain, tool, result.content, param_sem) == value:
                    return {"name": name, "arguments": args}, fact
    finally:
        engine.dispose()
    return None


def _candidate_args(domain: CompiledDomain, engine: Any, tool: Tool, sem: str, value: str) -> list[dict[str, Any]]:
    """Arguments of ``tool`` that return a row carrying ``value`` in a column of semantic type ``sem``."""
    entity = domain.spec.entity(tool.entity)
    table = domain.tables[entity.name]
    out = []
    with engine.connect() as conn:
        for column in entity.column_names:
            if sem_type(entity, column) != sem:
                continue
            for row in conn.execute(select(table).where(table.c[column] == value).limit(4)):
                row = dict(row._mapping)
                key = entity.key if tool.kind == "get" else tool.column
                if row.get(key) is not None:
                    out.append({key: row[key]})
    return out


def _only_value(domain: CompiledDomain, tool: Tool, content: dict[str, Any], sem: str) -> str | None:
    """The one value of semantic type ``sem`` in a result (a row, or a list of rows); None when there are more."""
    entity = domain.spec.entity(tool.entity)
    rows = content["results"] if isinstance(content.get("results"), list) else [content]
    values = {render_value(row[c]) for row in rows for c in entity.column_names
              if sem_type(entity, c) == sem and row.get(c) is not None}
    return values.pop() if len(values) == 1 else None


def decompose(ep: ReferenceEpisode, rng: random.Random, max_hidden: int) -> tuple[ReferenceEpisode, list[dict[str, str]]]:
    """Hide up to ``max_hidden`` values the user gives, each behind a lookup inserted before its first use; raises Unusable
    when none can be hidden. Returns the new episode and what was hidden (value, label, lookup tool)."""
    domain = domain_for(ep.env)
    task, calls, hidden = ep.task, list(ep.calls), []
    for _ in range(max_hidden):
        options = _hideable(task)
        rng.shuffle(options)
        for fact in options:
            step = _hiding(domain, ep.env, task, calls, fact, {h["value"] for h in hidden})
            if step is not None:
                task, calls = step[0], step[1]
                hidden.append({"value": fact["value"], "label": fact["label"], "lookup": step[1][step[2]]["name"]})
                break
        else:
            break
    if not hidden:
        raise Unusable("decompose: no value the user gives can be looked up in the environment instead")
    actions = json.dumps(calls)
    return replace(ep, task={**task, "golden_actions": actions}, calls=calls), hidden


def _hiding(domain: CompiledDomain, env: dict[str, Any], task: dict[str, Any], calls: list[dict[str, Any]],
            fact: dict[str, Any], hidden: set[str]) -> tuple[dict[str, Any], list[dict[str, Any]], int] | None:
    """(task without the fact, calls with the lookup inserted, the lookup's index) or None. ``hidden`` holds the
    values hidden before: a lookup whose key the user would have to state again (one of them) would undo that
    hiding (a cycle: last name -> email -> last name), so it is refused."""
    first = next((i for i, c in enumerate(calls) for p, v in c["arguments"].items()
                  if render_value(v) == fact["value"]), None)
    if first is None:
        return None
    param = next(p for p, v in calls[first]["arguments"].items() if render_value(v) == fact["value"])
    sem = next((p.sem for p in domain.tools[calls[first]["name"]].params if p.name == param), None)
    new_task = _hide(task, fact)
    if sem is None or new_task is None:
        return None
    # What the agent knows before the call that needs the value: the request, the facts it can ask for, and the
    # results of the calls before it (added by _lookup as it runs them).
    profile = " ".join(f["value"] for f in json_field(new_task["user_profile"])["facts"])
    known = f"{new_task['description']} {profile} "
    found = _lookup(domain, env, calls[:first], sem, fact["value"], known, {calls[first]["name"]})
    if found is None:
        return None
    lookup, stated = found
    if stated is not None:  # the user now states what identifies the row instead of its id
        profile = json_field(new_task["user_profile"])
        if stated["value"] in hidden or any(f["label"] == stated["label"] for f in profile["facts"]):
            return None
        new_task = {**new_task, "description": f"{new_task['description']} My {stated['label']} is {stated['value']}.",
                    "user_profile": json.dumps({**profile, "facts": [*profile["facts"], stated]})}
    new_calls = [*calls[:first], lookup, *calls[first:]]
    # A lookup whose input is what the served call returns makes that call a lookup of a known value (get_flight(F)
    # -> flight number -> lookup_flight_by_flight_number -> F): refused, like every read without a reason.
    if needless_reads(domain, new_calls, call_results(domain, bytes(env["db"]), new_calls),
                      said_before(new_task, new_calls)):
        return None
    return new_task, new_calls, first


class DecomposeParams(EpisodeParams):
    max_hidden: int = Field(2, ge=1, le=6, description="most values hidden per trajectory (one lookup each)")


# 4: compact tool schemas and results; one acting customer per task, identified first; no read without a
# reason; reasons, alternatives and the outcome stated in words that are true
# 5: the trajectory standard; finals rendered from what the writes did; the user's and agent's words varied
# 6: a refusal row stays a refusal
@stage(name=STAGE, version="6", params=DecomposeParams, inputs=("midtrain_env", "tokenizer"),
       outputs={"trajectories": trajectory_contract([TRANSFORM], checks=(VARIED_SENTENCES,)), REJECTED: ITEM_REJECTED.contract()})
def midtrain_decompose(inputs: Mapping[str, Artifact], params: DecomposeParams,
                       partition: str) -> dict[str, pl.DataFrame]:
    """Tool decomposition of every verified environment trajectory: hidden values looked up with another tool."""

    def hide(episode, rng):
        new, hidden = decompose(episode, rng, params.max_hidden)
        return new, {"hidden": len(hidden), "values": hidden}

    return augment(inputs["midtrain_env"].read("trajectories"), params, partition, STAGE, TRANSFORM, hide, inputs)

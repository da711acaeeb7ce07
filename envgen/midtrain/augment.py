"""Augmentations of a verified environment episode (LongCat-Flash-Thinking-2601 section 2): each returns a new
``Episode`` the reference agent plays again, so every augmented trajectory is verified by execution like its parent.

- tool decomposition: a value the user gives (stated in the request, or told when asked) is hidden in the
  environment state: dropped from the request and the profile, and looked up instead with another tool whose result holds it (the report's recipient that must be
  read from the contacts database); repeated up to ``max_hidden`` times;
- reasoning decomposition (multi-step decision enrichment): at each action, alternative candidates (a neighbouring
  tool of the graph, a wrong row, a missing argument) compared in the reasoning before the executed one is chosen;
  the executed actions are unchanged;
- planning: a plan of sub-goals derived from the calls' dependency structure, before the first action.
"""

from __future__ import annotations

import json
import random
from typing import Any

from sqlalchemy import select

from envgen.compiler import CompiledDomain, Tool, sem_type
from envgen.construct import user_knowable
from envgen.customers import owner_of
from envgen.midtrain.records import needless_reads, value_texts
from envgen.midtrain.synth import Episode, Unusable, call_results, said_before
from envgen.runtime import domain_for, json_field
from envgen.seeding import engine_from_bytes
from envgen.taskgen import render_value
from envgen.tools import Executor, call_tool

# --- tool decomposition -----------------------------------------------------------------------------------

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


def decompose(ep: Episode, rng: random.Random, max_hidden: int) -> tuple[Episode, list[dict[str, str]]]:
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
    return Episode(ep.env, {**task, "golden_actions": actions}, calls), hidden


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


# --- reasoning decomposition ------------------------------------------------------------------------------


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


# --- planning ---------------------------------------------------------------------------------------------


def plan(ep: Episode) -> tuple[Episode, list[str]]:
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
        steps = ", then ".join(ep.calls[k]["name"] for k in goal)
        deps = sorted({owner[j] + 1 for k in goal for j in range(k) if owner[j] != i
                       and domain.graph.has_edge(ep.calls[j]["name"], ep.calls[k]["name"])})
        after = f" (uses what step {', '.join(map(str, deps))} finds)" if deps else ""
        write = next((ep.calls[k] for k in goal if domain.tools[ep.calls[k]["name"]].is_write), None)
        what = domain.tools[write["name"]].description.split(". ")[0].rstrip(".").lower() if write else "check records"
        lines.append(f"{i + 1}. {what}: {steps}{after}.")
    text = "Plan:\n" + "\n".join(lines) + f"\nFirst step: {ep.calls[0]['name']}."
    return Episode(ep.env, ep.task, ep.calls, plan=text), lines

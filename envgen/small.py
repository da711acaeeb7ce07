"""Small environments for short-context policies: an environment restricted to the tools its task calls plus a few
distractors, offered with compact schemas.

A verified environment offers 20-81 tools (LongCat-Flash-Thinking-2601 section 3.1.1 keeps at least 20); with their
full OpenAI schemas that is about 13K tokens of the project tokenizer, past the tiny model's 4,096 positions. The
small view keeps the task solvable (every golden tool stays, so the golden trajectory replays unchanged) and keeps
the choice real: the distractors are graph neighbours of the golden tools first (the tools an agent confuses them
with), then any other tool. Compact schemas drop every description and ``additionalProperties``: a parameter keeps
its name and its type or enum, ``required`` stays (the agent loop's malformed-call check reads it), and the result
is still an OpenAI function schema, so the chat template renders it unchanged (measured: 130 instead of 240 tokens
per tool).

The environment offers a record's own ``tools`` when they name exactly its ``tool_names`` (``envgen.environment``), so a
small environment row behaves as an environment of its own everywhere: the agent loop, task filters, RL, evaluation.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from envgen.environment import domain_for, json_field


def compact_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI function schema with names, parameter types or enums and ``required`` only."""
    fn = schema["function"]
    parameters = fn.get("parameters") or {}
    properties = {
        name: {"enum": list(spec["enum"])} if "enum" in spec else {"type": spec.get("type", "string")}
        for name, spec in (parameters.get("properties") or {}).items()
    }
    return {"type": "function", "function": {"name": fn["name"], "parameters": {
        "type": "object", "properties": properties, "required": list(parameters.get("required") or [])}}}


def offered_tools(tool_names: Sequence[str], edges: Sequence[Sequence[str]], used: Sequence[str], distractors: int,
                  rng: random.Random) -> list[str]:
    """The tools ``used`` plus ``distractors`` others of ``tool_names``: graph neighbours of the used tools first,
    then the rest; sorted by name, so the order of the list tells nothing about the order of the calls."""
    if distractors < 0:
        raise ValueError(f"distractors={distractors}: must be >= 0")
    names, kept = set(tool_names), set(used)
    missing = sorted(kept - names)
    if missing:
        raise ValueError(f"the task calls tools the environment does not have: {missing}")
    neighbours = {v for u, v in edges if u in kept} | {u for u, v in edges if v in kept}
    near = sorted((neighbours & names) - kept)
    far = sorted(names - kept - set(near))
    extra = rng.sample(near, min(distractors, len(near)))
    extra += rng.sample(far, min(distractors - len(extra), len(far)))
    return sorted(kept | set(extra))


DISTRACTORS = 3
"""Tools offered beside a task's own by default (the tiny profile's ``small_envs`` and ``evaluate`` use 3)."""


def task_tools(env: Mapping[str, Any], used: Sequence[str], distractors: int = DISTRACTORS,
               rng: random.Random | int = 0) -> list[dict[str, Any]]:
    """The compact tool schemas to offer for a task: the tools ``used`` (names the task calls) plus ``distractors``
    others of the environment ``env`` (an environment record: ``tool_names``, ``spec_json``, ``spec_hash``),
    graph neighbours first (:func:`offered_tools`), each as :func:`compact_schema`; ``distractors=-1`` offers every
    tool of the environment. ``rng`` (a Random or a seed) draws the distractors. Sorted by name.

    The one rendering of offered tools for every reader of tasks and trajectories (mid-training routes, scoring,
    evaluation), so a model sees the same tool block everywhere."""
    domain = domain_for(dict(env))
    names = list(env["tool_names"])
    rng = rng if isinstance(rng, random.Random) else random.Random(rng)
    if distractors < 0:
        offered = sorted(names)
    else:
        present = set(names)
        edges = [(u, v) for u, v in domain.graph.edges if u in present and v in present]
        offered = offered_tools(names, edges, list(dict.fromkeys(used)), distractors, rng)
    return [compact_schema(domain.tools[name].schema()) for name in offered]


def small_environment(env: Mapping[str, Any], task: Mapping[str, Any], distractors: int, rng: random.Random,
                      compact: bool = True) -> dict[str, Any]:
    """The environment row restricted to the tools ``task``'s golden actions call plus ``distractors`` others
    (:func:`offered_tools`), with compact schemas unless ``compact`` is off; edges, counts and density follow."""
    used = list(dict.fromkeys(a["name"] for a in json_field(task["golden_actions"])))
    edges = json_field(env["edges"])
    names = offered_tools(list(env["tool_names"]), edges, used, distractors, rng)
    schemas = {s["function"]["name"]: s for s in json_field(env["tools"])}
    kept_edges = sorted([u, v] for u, v in edges if u in names and v in names)
    n = len(names)
    return {
        **env,
        "tool_names": names,
        "tools": json.dumps([compact_schema(schemas[name]) if compact else schemas[name] for name in names]),
        "edges": json.dumps(kept_edges),
        "fallback_chains": json.dumps([c for c in json_field(env["fallback_chains"]) if set(c) <= set(names)]),
        "n_tools": n,
        "n_edges": len(kept_edges),
        "density": round(len(kept_edges) / (n * (n - 1)), 6) if n > 1 else 0.0,
    }


def task_view(env: Mapping[str, Any], task: Mapping[str, Any], distractors: int) -> dict[str, Any]:
    """:func:`small_environment` as every reader of tasks offers it (RL, held-out scoring, evaluation): compact, its
    distractors drawn by the task's clean task id, so a noisy twin is offered its clean task's tools and a task the
    same tools in each of those readers. (``small_envs`` draws its own with its seed; its rows are already this
    small, so reading them through the view keeps their tools.)"""
    seed = task.get("clean_task_id") or task["task_id"]
    return small_environment(env, task, distractors, random.Random(f"task_view/{seed}"))

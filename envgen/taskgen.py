"""Task generation from the full chain, and the verification that keeps a task.

LongCat-Flash-Thinking-2601 section 3.1.1 (Task Generation): a task is a description, a user profile and a rubric,
generated from the environment's full tool chain only ("without any deliberate task design"). The user is the
customer the chains act for (``envgen.construct.Grounder``), named as that customer, asking for customer actions in
their intents' words and stating only what a person knows (``fact_sentence``); with ``question_prob`` they also ask
about the outcome. The rubric is the expected canonical database diff plus required outputs (amounts the writes
adjusted or created, and the answer to the question), and the acting customer, so the reward's ``policy`` fails a
write before identification or on another customer's record; it is kept only when (DESIGN.md section 7)

- every golden argument is derivable from the task text, the profile or an earlier tool output,
- the golden trajectory replays in the environment with reward 1, and
- each mutated trajectory (drop-write, wrong-arg, wrong-row, extra-write) scores 0.

Otherwise the task goes to ``rejected`` with the reason.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any

from pydantic import Field
from sqlalchemy.engine import Engine

from data_contracts.content import canonical_json
from data_contracts.stage import Params
from envgen.canonical import State, canonical_state, diff_states
from envgen.compiler import CompiledDomain
from envgen.construct import (
    BuiltEnvironment,
    ConstructionFailed,
    ConstructionSettings,
    Fact,
    Grounder,
    GroundingFailed,
    build_environment,
    seeded_faker,
)
from envgen.customers import POLICY as CUSTOMER_POLICY
from envgen.customers import owned_entities
from envgen.domain_spec import EntitySpec, FieldSpec
from envgen.environment import Environment, replay
from envgen.mutations import MUTATIONS
from envgen.seeding import engine_from_bytes, sqlite_bytes
from envgen.tools import Executor, call_tool, render_value, spoken

OPENERS = ("Hi, I need some help.", "Hello!", "Good afternoon.", "Hi there.", "Hello, I have a request.")


class TaskSettings(Params):
    inline_fact_prob: float = Field(0.5, ge=0.0, le=1.0, description="Chance a profile fact is also written in "
                                                                      "the task text (else the agent must ask).")
    question_prob: float = Field(0.5, ge=0.0, le=1.0, description="Chance the user also asks about the outcome "
                                 "(a field the last write sets), whose answer becomes a required output.")


def system_prompt(domain: CompiledDomain, extra_policies: tuple[str, ...] = ()) -> str:
    spec = domain.spec
    policies = "\n".join(f"- {p}" for p in (*(p.text for p in spec.policies), *extra_policies)) or "- (none)"
    return (f"You operate the {spec.description.rstrip('.')}. {spec.agent_instructions}\n"
            f"Policies:\n{policies}\nThe current time is {spec.now.isoformat()}.").strip()


def environment_record(domain: CompiledDomain, built: BuiltEnvironment, env_id: str, seed: int) -> dict[str, Any]:
    sub = domain.graph.subgraph(built.tools)
    edges = sorted([u, v] for u, v in sub.edges)
    n = len(built.tools)
    return {
        "env_id": env_id,
        "domain": domain.name,
        "spec_json": domain.spec.model_dump_json(),
        "spec_hash": domain.spec.spec_hash,
        "seed": seed,
        "now": domain.spec.now.isoformat(),
        "tool_names": list(built.tools),
        "tools": json.dumps(domain.schemas(built.tools)),
        "edges": json.dumps(edges),
        "chains": json.dumps([c.tools for c in built.chains]),
        "fallback_chains": json.dumps([c.tools for c in built.fallback_chains]),
        "n_tools": n,
        "n_edges": len(edges),
        "density": round(len(edges) / (n * (n - 1)), 6) if n > 1 else 0.0,
        "n_chains": len(built.chains),
        "fallback_used": built.stats.fallback_used,
        "expansion": json.dumps(built.stats.decisions),
        "db": built.db,
        "db_sha256": hashlib.sha256(built.db).hexdigest(),
    }


_ORDINALS = ("second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def _facts(built: BuiltEnvironment) -> list[Fact]:
    """All chains' facts, duplicates merged; a label used for two different values gets an ordinal word ("second
    reservation number"), as a person would say it."""
    out: list[Fact] = []
    base: list[str] = []
    for chain in built.chains:
        for f in chain.facts:
            if any(o.name == f.name and o.value == f.value for o in out):
                continue
            same = base.count(f.label)
            label = f.label if not same or "." in f.name else f"{_ORDINALS[min(same, len(_ORDINALS)) - 1]} {f.label}"
            base.append(f.label)
            out.append(Fact(f.name, label, f.value, f.source))
    return out


def _collect(obj: Any, into: set[str]) -> None:
    if isinstance(obj, dict):
        for v in obj.values():
            _collect(v, into)
    elif isinstance(obj, list):
        for v in obj:
            _collect(v, into)
    elif obj is not None:
        into.add(render_value(obj))


def _required_outputs(domain: CompiledDomain, actions: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[str]:
    """Amounts the agent must tell the user: numeric fields the writes adjusted on their target or created."""
    out: list[str] = []
    for a, res in zip(actions, results):
        tool = domain.tools[a["name"]]
        if not tool.is_write:
            continue
        action = domain.spec.action(tool.action)
        for eff in action.effects:
            if eff.kind == "adjust" and eff.row == "target":
                out.append(render_value(res[action.target][eff.field]))
            if eff.kind == "create":
                ent = domain.spec.entity(eff.entity)
                out += [render_value(res["created"][eff.entity][f.name]) for f in ent.fields if f.type == "money"]
    return list(dict.fromkeys(out))


def _spoken_field(f: FieldSpec) -> str:
    """How a person names field ``f``: its label, else its name in words ("passengers count" -> "number of
    passengers", "weight_kg" -> "weight in kg")."""
    if f.label:
        return f.label
    words = f.name.split("_")
    if words[-1] == "count" and len(words) > 1:
        return "number of " + " ".join(words[:-1])
    if words[-1] in ("kg", "gb", "sqm", "pct") and len(words) > 1:
        unit = {"kg": "kg", "gb": "GB", "sqm": "square metres", "pct": "percent"}[words[-1]]
        return " ".join(words[:-1]) + f" in {unit}"
    return " ".join(words)


def spoken_entity(e: EntitySpec) -> str:
    """How a person names a record of ``e``: its label without a trailing "id" or "number" ("reservation number"
    -> "reservation"), else its name in words."""
    if e.label:
        return re.sub(r" (id|number)$", "", e.label)
    return e.name.replace("_", " ")


def fact_sentence(domain: CompiledDomain, fact: Fact) -> str:
    """How the user states a fact: "My email address is x." for what they know of themselves, and for a fact
    that singles out one row of a list ("entity.field") a sentence about that row: "The order I mean was placed
    at 2026-05-22T03:30:00.", "The booking I mean has 12 nights.", "The amount of the charge I mean is 52.10."."""
    value = spoken(fact.value)
    if "." not in fact.name:
        return f"My {fact.label} is {value}."
    entity, column = fact.name.split(".", 1)
    e = domain.spec.entity(entity)
    f = e.field(column)
    thing = f"The {spoken_entity(e)} I mean"
    words = column.split("_")
    if f is not None and not f.label and len(words) == 2 and words[1] in ("at", "on", "for") and f.type in (
            "date", "datetime"):
        verb = words[0] if words[0].endswith("s") else f"was {words[0]}"  # "expires on", "was placed at"
        return f"{thing} {verb} {words[1]} {value}."
    if f is not None and not f.label and f.type == "int" and len(words) == 1 and words[0].endswith("s"):
        return f"{thing} has {value} {words[0]}."
    label = _spoken_field(f) if f is not None else column.replace("_", " ")
    return f"The {label} of the {spoken_entity(e)} I mean is {value}."


def _question(domain: CompiledDomain, actions: list[dict[str, Any]], results: list[dict[str, Any]],
              customer: str | None, rng: random.Random) -> tuple[str, str] | None:
    """A question about the outcome of the last write (a field its effects set or adjust on its target, as the
    write's result returns it) and its answer, or None when the write changes no such field a person asks about."""
    last = max(i for i, a in enumerate(actions) if domain.tools[a["name"]].is_write)
    action = domain.spec.action(domain.tools[actions[last]["name"]].action)
    target = domain.spec.entity(action.target)
    row = results[last].get(action.target) or {}
    fields = [f for eff in action.effects if eff.kind in ("set", "adjust") and eff.row == "target"
              and (f := target.field(eff.field)) is not None and f.type != "bool" and not f.internal
              and row.get(f.name) is not None]
    if not fields:
        return None
    f = rng.choice(list(dict.fromkeys(fields)))
    if customer is not None and target.name == getattr(domain.spec.customer_entity, "name", None):
        what = f"my {_spoken_field(f)}"
    else:
        whose = "my" if customer is not None and target.name in owned_entities(domain.spec) else "the"
        what = f"the {_spoken_field(f)} of {whose} {spoken_entity(target)}"
    return f"What is {what} after that?", render_value(row[f.name])


def _persona(domain: CompiledDomain, db: bytes, customer: str | None, rng: random.Random) -> str:
    """The user's name: the acting customer's own (its name fields), else a generated one."""
    entity = domain.spec.customer_entity
    if customer is not None and entity is not None:
        engine = engine_from_bytes(db)
        with engine.connect() as conn:
            row = Executor(domain).get(conn, entity.name, customer) or {}
        engine.dispose()
        names = [str(row[f.name]) for f in entity.fields if f.type == "string" and not f.unique
                 and f.name.endswith("name") and row.get(f.name)]
        if names:
            return " ".join(names[:2])
    return seeded_faker(domain.spec.locale, rng).name()


def _run(domain: CompiledDomain, db: bytes, actions: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Engine]:
    """Execute actions on a private copy; returns the results and the engine (for state inspection)."""
    engine = engine_from_bytes(db)
    ex = Executor(domain)
    results = [call_tool(ex, engine.begin, a["name"], a["arguments"], domain.spec.now).content for a in actions]
    return results, engine


def _run_with_states(domain: CompiledDomain, db: bytes, actions: list[dict[str, Any]], tables: list[str]
                     ) -> tuple[list[dict[str, Any]], list[State]]:
    """Like ``_run``, plus the canonical state of ``tables`` before the first call and after each write."""
    engine = engine_from_bytes(db)
    ex = Executor(domain)

    def state() -> State:
        with engine.connect() as conn:
            return canonical_state(conn, domain, tables)

    results, states = [], [state()]
    for a in actions:
        results.append(call_tool(ex, engine.begin, a["name"], a["arguments"], domain.spec.now).content)
        if domain.tools[a["name"]].is_write:
            states.append(state())
    return results, states


def write_tables(domain: CompiledDomain, tools: list[str]) -> list[str]:
    return sorted({t for n in tools for t in domain.tools[n].writes})


def make_task(domain: CompiledDomain, env: dict[str, Any], built: BuiltEnvironment, rng: random.Random,
              settings: TaskSettings, mutations: bool = True,
              customer: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(task record, None) or (None, rejection reason); ``mutations=False`` skips the mutation checks (a task
    whose golden trajectory is itself the product, as in mid-training, not an RL reward). With ``customer`` (the
    key of the acting customer) the rubric names it and the system prompt states the customer policy, so the
    reward's ``policy`` fails a write before identification or on another customer's record."""
    actions = [a for chain in built.chains for a in chain.actions]
    facts = _facts(built)
    hint_labels = [f.label for f in facts if "." in f.name]
    if len(set(hint_labels)) < len(hint_labels):
        return None, "ambiguous task: two chains single out rows by the same field"
    intents = [c.intent for c in built.chains]
    if len(set(intents)) < len(intents):  # "send my issue for review, and finally send my issue for review"
        return None, f"ambiguous task: two chains ask the same thing ({intents[0]!r})"
    tables = write_tables(domain, built.tools)
    results, states = _run_with_states(domain, built.db, actions, tables)
    failed = [(a["name"], r["error"]) for a, r in zip(actions, results) if "error" in r]
    if failed:
        return None, f"golden call failed: {failed[0][0]}: {failed[0][1]}"
    # A golden write that changes nothing (a row set to the value it has) cannot be told from a dropped write
    # or from a write to another row that changes nothing either.
    writes = [a["name"] for a in actions if domain.tools[a["name"]].is_write]
    idle = [name for name, old, new in zip(writes, states, states[1:]) if old == new]
    if idle:
        return None, f"golden write changes nothing: {idle[0]} leaves the database as it was"
    expected = json.loads(canonical_json(diff_states(states[0], states[-1], domain)))
    inline = [f for f in facts if f.source == "task" or rng.random() < settings.inline_fact_prob]
    request = intents[0] if len(intents) == 1 else ", then ".join(intents[:-1]) + f", and finally {intents[-1]}"
    sentences = [rng.choice(OPENERS), f"I would like to {request}."]
    sentences += [fact_sentence(domain, f) for f in inline
                  if not (f.source == "task" and spoken(f.value) in request)]
    required = _required_outputs(domain, actions, results)
    question = _question(domain, actions, results, customer, rng) if rng.random() < settings.question_prob else None
    if question is not None:
        sentences.append(question[0])
        required = list(dict.fromkeys([*required, question[1]]))
    description = " ".join(sentences)
    task = {
        "task_id": f"{env['env_id']}-t0",
        "env_id": env["env_id"],
        "domain": domain.name,
        "system_prompt": system_prompt(domain, (CUSTOMER_POLICY,) if customer is not None else ()),
        "description": description,
        "user_profile": json.dumps({"persona": _persona(domain, built.db, customer, rng), "facts": [
            {"name": f.name, "label": f.label, "value": spoken(f.value)} for f in facts]}),
        "rubric": json.dumps({"expected_diff": expected, "required_outputs": required,
                              "tables": tables, "components": ["db_state", "required_outputs", "policy"],
                              **({"customer": customer} if customer is not None else {})}),
        "golden_actions": json.dumps(actions),
        "difficulty": json.dumps({
            "n_golden_calls": len(actions), "n_writes": sum(domain.tools[a["name"]].is_write for a in actions),
            "n_chains": len(built.chains), "n_env_tools": env["n_tools"], "env_density": env["density"],
            "n_facts": len(facts), "n_facts_to_ask": len(facts) - len(inline),
            "fallback_used": built.stats.fallback_used}),
        "noise": json.dumps({"level": 0, "transforms": []}),
    }
    reason = verify_task(domain, env, task, rng, mutations)
    return (task, None) if reason is None else (None, reason)


def build_verified(domain: CompiledDomain, env_id: str, seed: int,
                   settings: ConstructionSettings | None = None,
                   task_settings: TaskSettings | None = None) -> tuple[dict | None, dict | None, str]:
    """(environment record with its task as ``task_json``, task record, '') or (None, None, reason); the reason
    starts with the step that failed ('construction:' or 'task:')."""
    try:
        built = build_environment(domain, seed, settings or ConstructionSettings())
    except ConstructionFailed as exc:
        return None, None, f"construction: {exc}"
    env = environment_record(domain, built, env_id, seed)
    task, reason = make_task(domain, env, built, random.Random(seed), task_settings or TaskSettings(),
                             customer=built.customer)
    if task is None:
        return None, None, f"task: {reason}"
    env["task_json"] = json.dumps(task)
    return env, task, ""


def underivable_arguments(task: dict[str, Any], tool_log: list[dict[str, Any]]) -> list[str]:
    """Golden arguments not found in the task text, the profile or an earlier tool output."""
    profile = {f["value"] for f in json.loads(task["user_profile"])["facts"]}
    seen: set[str] = set()
    missing = []
    for i, a in enumerate(json.loads(task["golden_actions"])):
        for k, v in a["arguments"].items():
            if all(text not in seen and text not in profile and text not in task["description"]
                   for text in {render_value(v), spoken(v)}):
                missing.append(f"{a['name']}.{k}={render_value(v)}")
        if i < len(tool_log):
            _collect(tool_log[i]["content"], seen)
    return missing


def mutate(domain: CompiledDomain, env: dict[str, Any], task: dict[str, Any], kind: str,
           rng: random.Random) -> list[dict[str, Any]] | None:
    """A mutated copy of the golden actions (None when this kind cannot be built for the task)."""
    actions = json.loads(task["golden_actions"])
    writes = [i for i, a in enumerate(actions) if domain.tools[a["name"]].is_write]
    last = writes[-1]
    if kind == "drop-write":
        return actions[:last] + actions[last + 1:]
    tool = domain.tools[actions[last]["name"]]
    action = domain.spec.action(tool.action)
    target = domain.spec.entity(action.target)
    golden_keys = {render_value(v) for a in actions for v in a["arguments"].values()}
    engine = engine_from_bytes(env["db"])
    ex = Executor(domain)
    with engine.connect() as conn:
        def keys(entity: str) -> list[str]:
            key = domain.spec.entity(entity).key
            return [r[key] for r in ex.fetch(conn, entity, "", None, None) if r[key] not in golden_keys]

        if kind == "wrong-arg":
            plain = [q for q in action.params if q.ref is None]
            args = dict(actions[last]["arguments"])
            if plain:
                q = rng.choice(plain)
                if q.values:
                    args[q.name] = rng.choice([v for v in q.values if v != args[q.name]])
                elif q.type in ("int", "float", "money"):
                    args[q.name] = args[q.name] + 1 if q.max is None or args[q.name] + 1 <= q.max else args[q.name] - 1
                else:
                    args[q.name] = f"{args[q.name]}0"
            else:
                refs = [q for q in action.params if q.ref is not None]
                name, options = (refs[0].name, keys(refs[0].ref)) if refs else (target.key, [])
                args[name] = rng.choice(options) if options else f"{target.id_prefix}MISSING"
            return actions[:last] + [{"name": tool.name, "arguments": args}] + actions[last + 1:]
        if kind == "wrong-row":
            options = keys(action.target)
            rng.shuffle(options)
            prefix = actions[:last]
            tails = [[{"name": tool.name, "arguments": {**actions[last]["arguments"], target.key: k}}]
                     + actions[last + 1:] for k in options[:8]]
        else:  # extra-write: one more successful write the task did not ask for, that changes the database
            prefix = actions
    # Prefer a mutation whose writes all succeed: it changes the database the wrong way instead of erroring.
    # The shared prefix runs once; each candidate tail runs on a copy of the state after it.
    _, engine = _run(domain, env["db"], prefix)
    after = sqlite_bytes(engine)
    if kind == "extra-write":
        tails = _extra_writes(domain, env["tool_names"], engine, golden_keys, rng)
    tables = write_tables(domain, env["tool_names"])
    with engine.connect() as conn:
        state = canonical_state(conn, domain, tables)
    for tail in tails[:48]:
        results, tail_engine = _run(domain, after, tail)
        if any("error" in r for r in results):
            continue
        if kind == "extra-write":
            with tail_engine.connect() as conn:
                if canonical_state(conn, domain, tables) == state:
                    continue  # a no-op write: the rubric could not see it
        return prefix + tail
    return prefix + tails[0] if tails and kind == "wrong-row" else None


def _extra_writes(domain: CompiledDomain, tool_names: list[str], engine: Engine, golden_keys: set[str],
                  rng: random.Random, wanted: int = 8) -> list[list[dict[str, Any]]]:
    """Candidate extra writes (one call each) on rows the golden actions do not name, drafted like golden writes
    (reference rows, values drawn within their bounds) on ``engine``, the state after the golden actions; calls
    whose preconditions and policies already hold come first, so strict writes on small databases still yield one.
    The drafting patches nothing."""
    ready: list[list[dict[str, Any]]] = []
    other: list[list[dict[str, Any]]] = []
    env_writes = [n for n in tool_names if domain.tools[n].is_write]
    with engine.begin() as conn:
        g = Grounder(domain, conn, rng)
        g.reserved = {(e.name, r[e.key]) for e in domain.spec.entities for r in g.rows(e.name)
                      if render_value(r[e.key]) in golden_keys}
        for name in rng.sample(env_writes, len(env_writes)):
            action = domain.spec.action(domain.tools[name].action)
            key = g.ents[action.target].key
            targets = [r for r in g.rows(action.target) if (action.target, r[key]) not in g.reserved]
            for target in rng.sample(targets, min(16, len(targets))):
                try:
                    args, ctx, conds = g.draft_action(action, target)
                except GroundingFailed:
                    continue
                (ready if all(ctx.holds(c) for c in conds) else other).append([{"name": name, "arguments": args}])
            if len(ready) >= wanted:
                break
    return ready + other


def verify_task(domain: CompiledDomain, env: dict[str, Any], task: dict[str, Any], rng: random.Random,
                mutations: bool = True) -> str | None:
    """None when the task is kept, else the rejection reason."""
    environment = Environment(env)
    golden = replay(environment, task)
    if golden.reward != 1.0:
        return f"golden trajectory scored {golden.reward} ({golden.components})"
    missing = underivable_arguments(task, environment.tool_log)
    if missing:
        return f"golden arguments not derivable: {', '.join(missing[:3])}"
    for kind in MUTATIONS if mutations else ():
        mutated = mutate(domain, env, task, kind, rng)
        if mutated is None:
            return f"mutation {kind} could not be constructed"
        episode = replay(environment, task, mutated)
        if episode.reward != 0.0:
            return f"mutation {kind} was not detected (reward {episode.reward})"
    environment.close()
    return None

"""Environment-grounded synthesis (LongCat-Flash-Thinking-2601 section 2, "Environment-grounded synthesis"):
tool chains sampled from an environment's dependency graph (varying length and depth), grounded on a copy of its
database, a reverse-synthesized request and user profile that make every argument derivable (``make_task``), and
the chain played in the environment with the profile-grounded user by a reference agent that says, before each
call, why this tool and where each argument comes from. An episode is kept only when the environment scores it 1 (the
rubric: canonical database diff + required outputs + policies).

The reference agent's words are the offline default of every text; each is also a ``Slot`` a teacher may rewrite
(``inference.teacher``), after which the conversation is verified again by execution (``trajectory_checks.verify_execution``).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from envgen.compiler import CompiledDomain, Tool
from envgen.construct import (
    BuiltEnvironment,
    ExpansionStats,
    GroundedChain,
    Grounder,
    _try_ground,
    sample_chain,
    spoken_intent,
)
from envgen.customers import owner_of, owner_path
from envgen.domain_spec import name_field
from envgen.environment import Environment, domain_for, json_field, render_result, replay
from envgen.seeding import engine_from_bytes, sqlite_bytes
from envgen.small import task_tools
from envgen.taskgen import OPENERS, TaskSettings, make_task
from envgen.tools import Executor, call_tool, render_value
from envgen.trajectory_checks import Slot, needless_reads, tool_failed, value_texts
from envgen.trajectory_standard import untrue_world
from tasks.midtrain import words

ENV_FIELDS = ("env_id", "domain", "spec_json", "spec_hash", "now", "tool_names")
"""What ``Environment`` needs of an environment record beside its database (``verify_input.env``)."""


@dataclass
class ReferenceEpisode:
    """What the reference agent plays: an environment (record with ``db``), a task, the calls in order, and what
    augmentations add: reasoning notes per call, a plan before the first action, calls preceded by a failed try."""

    env: dict[str, Any]
    task: dict[str, Any]
    calls: list[dict[str, Any]]
    notes: dict[int, str] = field(default_factory=dict)
    plan: str | None = None
    retries: frozenset[int] = frozenset()
    refusal: str | None = None  # the closing message of a request the agent must refuse (no write happens)
    offered: tuple[str, ...] = ()  # the tools the row offers, when an augmentation chose them (its notes name them)


@dataclass
class Played:
    messages: list[dict[str, Any]]
    slots: list[Slot]
    tools: list[dict[str, Any]]


class Unusable(Exception):
    """The episode cannot be synthesized or does not verify; the message is the rejection reason."""


# --- new tasks on an environment -------------------------------------------------------------------------------


def identifying_tool(domain: CompiledDomain, allowed: set[str]) -> Tool | None:
    """The tool the agent identifies the customer with: a lookup by email (what a customer knows) first, else a get
    by the customer's id."""
    customer = domain.spec.customer_entity
    tools = [domain.tools[n] for n in sorted(allowed) if domain.tools[n].entity == getattr(customer, "name", None)]
    return next((t for t in tools if t.kind == "lookup" and t.column == "email"),
                next((t for t in tools if t.kind == "get"), None))


def sample_task(env_row: dict[str, Any], rng: random.Random, max_chains: int, max_reads: int,
                settings: TaskSettings, suffix: str, mutations: bool = False) -> ReferenceEpisode:
    """Chains sampled from the environment's own tools (1..max_chains chains of 1..max_reads reads each), grounded on
    a copy of its database for one acting customer, and the verified task ``make_task`` reverse-synthesizes for
    them (``mutations``: also require the four mutated trajectories to score 0, the check an RL task needs).

    The grounder acts for the owner of the first chain's written rows (``envgen.construct.Grounder``): its first
    call identifies them by what they state (an email), and every key a later call takes is returned by an earlier
    call that starts from what the user knows."""
    domain = domain_for(env_row)
    allowed = set(env_row["tool_names"])
    identifying = identifying_tool(domain, allowed)
    if identifying is None:
        customer = domain.spec.customer_entity
        raise Unusable(f"domain {domain.name} has no customer entity" if customer is None else
                       f"the environment has no tool to identify the {customer.name} (a lookup by email, or a get)")
    engine = engine_from_bytes(bytes(env_row["db"]))
    wanted = rng.randint(1, max_chains)
    chains: list[GroundedChain] = []
    with engine.begin() as conn:
        grounder = Grounder(domain, conn, rng, allowed)
        for _ in range(4 * wanted):
            if len(chains) == wanted:
                break
            grounded = _try_ground(grounder, sample_chain(domain, rng, allowed, rng.randint(1, max_reads)))
            if grounded is not None:
                chains.append(grounded)
        if not chains:
            raise Unusable("no chain writing one customer's records could be grounded on this environment")
    db = sqlite_bytes(engine)
    env = {**env_row, "env_id": f"{env_row['env_id']}~{suffix}", "db": db,
           "db_sha256": hashlib.sha256(db).hexdigest(), "chains": json.dumps([c.tools for c in chains])}
    built = BuiltEnvironment(list(env_row["tool_names"]), chains, [], ExpansionStats(), db, grounder.customer)
    task, reason = make_task(domain, env, built, rng, settings, mutations, customer=grounder.customer)
    if task is None:
        raise Unusable(f"task: {reason}")
    task = without_needless_reads(domain, env, task)
    calls = json.loads(task["golden_actions"])
    if (problem := untrue_world(domain, db, calls)) is not None:
        raise Unusable(problem)
    return ReferenceEpisode(env, task, calls)


def call_results(domain: CompiledDomain, db: bytes, calls: list[dict[str, Any]]) -> list[str]:
    """The rendered results of ``calls`` run in order on a private copy of ``db``."""
    engine = engine_from_bytes(db)
    ex = Executor(domain)
    try:
        return [render_result(call_tool(ex, engine.begin, c["name"], c["arguments"], domain.spec.now).content)
                for c in calls]
    finally:
        engine.dispose()


def said_before(task: dict[str, Any], calls: list[dict[str, Any]]) -> list[str]:
    """What the user has said before each call when the reference agent plays ``calls``: the request, and every
    profile fact an earlier call took as an argument (asked for and answered before that call)."""
    facts = {f["value"] for f in json_field(task["user_profile"])["facts"]}
    said, told = [], []
    for call in calls:
        said.append("\n".join([str(task["description"]), *told]))
        told += [render_value(v) for v in call["arguments"].values() if render_value(v) in facts]
    return said


def without_needless_reads(domain: CompiledDomain, env: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """The task with every read that has no reason dropped (``trajectory_checks.needless_reads``: what it would return is
    stated or returned already), and the facts only those reads needed gone from the profile and the request."""
    calls = json.loads(task["golden_actions"])
    while needless := needless_reads(domain, calls, call_results(domain, bytes(env["db"]), calls),
                                     said_before(task, calls)):
        calls = calls[:needless[0]] + calls[needless[0] + 1:]
    used = {render_value(v) for c in calls for v in c["arguments"].values() if v is not None}
    profile = json_field(task["user_profile"])
    facts = [f for f in profile["facts"] if f["value"] in used or "." in f["name"]]
    description = str(task["description"])
    for f in profile["facts"]:
        if f not in facts:
            description = description.replace(f" My {f['label']} is {f['value']}.", "")
    return {**task, "golden_actions": json.dumps(calls), "description": description,
            "user_profile": json.dumps({**profile, "facts": facts})}


def refusal_episode(ep: ReferenceEpisode, rng: random.Random) -> ReferenceEpisode:
    """The episode's customer asks to change a record of another customer (the first write's target, swapped for
    a row of the same entity another customer owns), naming it as a person does (a confirmation code, a flight
    number: ``envgen.domain_spec.name_field``, never its key): the reference agent identifies them, looks that record up
    by its name, sees whose it is and refuses; nothing is written, and the rubric expects the database unchanged.
    Raises Unusable when the record has no name a person knows, no tool finds it by that name, or no other
    customer owns one."""
    domain = domain_for(ep.env)
    customer = json_field(ep.task["rubric"]).get("customer")
    write = next((c for c in ep.calls if domain.tools[c["name"]].is_write), None)
    if customer is None or write is None or not ep.calls or domain.tools[ep.calls[0]["name"]].is_write:
        raise Unusable("refusal: the episode has no identified customer and write")
    action = domain.spec.action(domain.tools[write["name"]].action)
    target = domain.spec.entity(action.target)
    name = name_field(target)
    finder = next((n for n in sorted(ep.env["tool_names"]) if domain.tools[n].kind == "lookup"
                   and domain.tools[n].entity == target.name and name is not None
                   and domain.tools[n].column == name.name), None)
    if finder is None or owner_path(domain, target.name) in (None, ()):
        raise Unusable(f"refusal: no tool finds a {target.name} by a name a person knows")
    engine = engine_from_bytes(bytes(ep.env["db"]))
    try:
        with engine.connect() as conn:
            others = [r for r in Executor(domain).fetch(conn, target.name, "", None, None)
                      if r.get(name.name) is not None
                      and owner_of(domain, conn, target.name, r[target.key]) not in (None, customer)]
            other = rng.choice(others) if others else None
            intent = spoken_intent(domain, conn, action, {**write["arguments"], target.key: other[target.key]}) \
                if other is not None else ""
    finally:
        engine.dispose()
    if other is None:
        raise Unusable(f"refusal: every {target.name} belongs to the customer")
    said = render_value(other[name.name])
    what = target.label or target.name.replace("_", " ")
    identify = ep.calls[0]
    facts = [f for f in json_field(ep.task["user_profile"])["facts"]
             if f["value"] in {render_value(v) for v in identify["arguments"].values()}]
    label = name.label or name.name.replace("_", " ")
    stated = " ".join(f"My {f['label']} is {f['value']}." for f in facts)
    description = f"{rng.choice(OPENERS)} I would like to {intent}. {stated} The {label} is {said}."
    profile = {**json_field(ep.task["user_profile"]), "facts": [*facts, {"name": name.name, "label": label,
                                                                          "value": said}]}
    calls = [identify, {"name": finder, "arguments": {name.name: other[name.name]}}]
    refused = words.refusal(what, said, domain.tools[write["name"]], rng)
    rubric = {**json_field(ep.task["rubric"]), "required_outputs": []}
    task = {**ep.task, "task_id": f"{ep.task['task_id']}-refusal", "description": description,
            "user_profile": json.dumps(profile), "golden_actions": json.dumps(calls), "rubric": json.dumps(rubric)}
    unchanged = replay(Environment(ep.env), {**task, "rubric": json.dumps({**rubric, "expected_diff": None})},
                       calls, refused).info["diff"]
    task["rubric"] = json.dumps({**rubric, "expected_diff": json.loads(json.dumps(unchanged, default=str))})
    return ReferenceEpisode(ep.env, task, calls, notes={1: words.whose(what, said, rng)}, refusal=refused)


def restate(task: dict[str, Any], rng: random.Random, share: float) -> dict[str, Any]:
    """The task with another request: each profile fact the user may state up front ("My <label> is <value>.") is
    stated with probability ``share``, otherwise the agent has to ask for it; facts that single out a row and values
    inside the intent stay (LongCat-Flash-Thinking-2601 3.1.1: requests needing varying degrees of clarification)."""
    text = str(task["description"])
    for fact in json_field(task["user_profile"])["facts"]:
        if "." in fact["name"]:
            continue
        sentence = f" My {fact['label']} is {fact['value']}."
        rest = text.replace(sentence, "")
        if rng.random() < share:
            text = text if sentence in text or fact["value"] in rest else text + sentence
        elif sentence in text and fact["value"] not in rest:
            text = rest
    return {**task, "description": text}


def retry_candidates(domain: CompiledDomain, calls: list[dict[str, Any]]) -> list[int]:
    """Calls a mistyped first try would make fail (a key lookup): where a failed call and its recovery fit."""
    return [k for k, c in enumerate(calls) if domain.tools[c["name"]].kind in ("get", "lookup")]


def episode_of(row: dict[str, Any]) -> ReferenceEpisode:
    """The episode of a verified trajectory row (its environment, task and successful calls), for augmentation; a
    row without a write is a refusal, and its closing message stays the refusal."""
    vi = json_field(row["verify_input"])
    messages = json_field(row["messages"])
    results = {m.get("tool_call_id"): m for m in messages if m["role"] == "tool"}
    calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
             for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
             if not tool_failed(results.get(c.get("id"), {}))]
    env = {**vi["env"], "db": bytes(row["env_db"])}
    domain = domain_for(env)
    refused = None if any(domain.tools[c["name"]].is_write for c in calls) else str(messages[-1]["content"])
    return ReferenceEpisode(env, dict(vi["task"]), calls, refusal=refused)


def _teacher_prompt(kind: str, default: str, context: str, keep: tuple[str, ...]) -> str:
    must = f" Keep these values exactly as written: {', '.join(keep)}." if keep else ""
    return (f"Rewrite the {kind} below in your own words, as one short natural paragraph; no tool-call markup."
            f"{must}\nContext: {context}\n{kind.capitalize()}: {default}")


# --- playing an episode ------------------------------------------------------------------------------------


def _call_message(n: int, content: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _mistyped(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments with the first string value mistyped (its last character dropped): a lookup that fails."""
    for key, value in arguments.items():
        if isinstance(value, str) and len(value) > 2:
            return {**arguments, key: value[:-1]}
    return None


def play(ep: ReferenceEpisode, rng: random.Random, distractors: int = 4) -> Played:
    """Play the episode in the environment with the profile-grounded user; raises Unusable unless it scores 1."""
    domain = domain_for(ep.env)
    environment = Environment(ep.env)
    try:
        return _play(domain, environment, ep, rng, distractors)
    finally:
        environment.close()


def _play(domain: CompiledDomain, environment: Environment, ep: ReferenceEpisode, rng: random.Random,
          distractors: int) -> Played:
    obs = environment.reset(ep.task, words.SpeakingUser(ep.task, rng))
    messages = [dict(m) for m in obs.messages]
    request = str(messages[1]["content"])
    facts = json_field(ep.task["user_profile"])["facts"]
    stated = tuple(f["value"] for f in facts if f["value"] in request)
    slots = [Slot(1, "request", _teacher_prompt("request", request, "a customer writes to a support agent", stated),
                  request, stated)]
    n_calls = 0
    done, reward = False, 0.0

    def step(message: dict[str, Any]) -> list[dict[str, Any]]:
        nonlocal done, reward
        messages.append(message)
        out, reward, done, _ = environment.step(message)
        names = [c["function"]["name"] for c in message.get("tool_calls") or []]
        for m, name in zip(out.messages, names, strict=False):
            m.setdefault("name", name)  # only for words.source; stripped below
        messages.extend(dict(m) for m in out.messages)
        return out.messages

    for k, call in enumerate(ep.calls):
        known = "\n".join(str(m.get("content") or "") for m in messages)
        missing = [v for v in call["arguments"].values() if v is not None
                   and not any(t in known for t in value_texts(v))]
        if missing:
            wanted = [f for f in facts if any(f["value"] in value_texts(v) for v in missing)]
            if len(wanted) < len(set(map(render_value, missing))):
                raise Unusable(f"{call['name']}: an argument is neither stated, known to the user nor looked up")
            lead = f"{ep.plan}\n\n" if ep.plan and n_calls == 0 and len(messages) == 2 else ""
            question = lead + words.question([f["label"] for f in wanted], rng)
            slots.append(Slot(len(messages), "question", _teacher_prompt(
                "question", question, "a support agent asks the customer", tuple(f["label"] for f in wanted)),
                question, tuple(f["label"] for f in wanted)))
            [reply] = step({"role": "assistant", "content": question})
            values = tuple(f["value"] for f in wanted)
            if reply["role"] != "user" or not all(v in reply["content"] for v in values):
                raise Unusable(f"the user did not give their {' and '.join(f['label'] for f in wanted)}")
            slots.append(Slot(len(messages) - 1, "reply", _teacher_prompt(
                "reply", reply["content"], "the customer answers the agent", values), reply["content"], values))
        tried, mistyped = words.retry_texts(call["name"], rng)
        if k in ep.retries and (wrong := _mistyped(call["arguments"])) is not None:
            [result] = step(_call_message(n_calls, tried, call["name"], wrong))
            n_calls += 1
            if not tool_failed(result):
                raise Unusable("the mistyped retry did not fail")
        text = words.reasoning(domain, ep.calls, k, messages, request, rng)
        if k in ep.retries:
            text = f"{mistyped} {text}"
        if k in ep.notes:
            text = f"{ep.notes[k]}\n{text}"
        if ep.plan and n_calls == 0 and len(messages) == 2:
            text = f"{ep.plan}\n\n{text}"
        slots.append(Slot(len(messages), "reasoning", _teacher_prompt(
            "reasoning", text, f"a support agent thinks before calling {call['name']}", ()), text))
        [result] = step(_call_message(n_calls, text, call["name"], call["arguments"]))
        n_calls += 1
        if tool_failed(result):
            raise Unusable(f"{call['name']} failed: {result['content'][:200]}")
    final = ep.refusal or words.final_text(domain, bytes(ep.env["db"]), ep.calls, rng)
    outputs = tuple(str(v) for v in json_field(ep.task["rubric"])["required_outputs"])
    slots.append(Slot(len(messages), "final", _teacher_prompt(
        "final message", final, "a support agent reports the outcome", outputs), final, outputs))
    step({"role": "assistant", "content": final})
    if not done or reward != 1.0:
        raise Unusable(f"the played episode scores {reward} ({'ended' if done else 'not ended'})")
    for m in messages:
        m.pop("name", None)
    tools = (task_tools(ep.env, ep.offered, 0, rng) if ep.offered
             else task_tools(ep.env, [c["name"] for c in ep.calls], distractors, rng))
    return Played(messages, slots, tools)

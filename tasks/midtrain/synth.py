"""Environment-grounded synthesis (LongCat-Flash-Thinking-2601 section 2, "Environment-grounded synthesis"):
tool chains sampled from an environment's dependency graph (varying length and depth), grounded on a copy of its
database, a reverse-synthesized request and user profile that make every argument derivable (``make_task``), and
the chain played through the runtime with the profile-grounded user by a reference agent that says, before each
call, why this tool and where each argument comes from. An episode is kept only when the runtime scores it 1 (the
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
)
from envgen.customers import owner_of, owner_path, written_rows
from envgen.runtime import Environment, domain_for, json_field, render_result, replay
from envgen.seeding import engine_from_bytes, sqlite_bytes
from envgen.small import task_tools
from envgen.taskgen import OPENERS, TaskSettings, make_task, render_value
from envgen.tools import Executor, call_tool
from envgen.trajectory_checks import Slot, needless_reads, tool_failed, value_texts

ENV_FIELDS = ("env_id", "domain", "spec_json", "spec_hash", "now", "tool_names")
"""What the runtime needs of an environment record beside its database (``verify_input.env``)."""


@dataclass
class Episode:
    """What the reference agent plays: an environment (record with ``db``), a task, the calls in order, and what
    augmentations add: reasoning notes per call, a plan before the first action, calls preceded by a failed try."""

    env: dict[str, Any]
    task: dict[str, Any]
    calls: list[dict[str, Any]]
    notes: dict[int, str] = field(default_factory=dict)
    plan: str | None = None
    retries: frozenset[int] = frozenset()
    refusal: str | None = None  # the closing message of a request the agent must refuse (no write happens)


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
                settings: TaskSettings, suffix: str, mutations: bool = False) -> Episode:
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
    return Episode(env, task, json.loads(task["golden_actions"]))


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


_REFUSE = ("{what} {key} is not on your account, so I cannot {purpose}. Only its holder can ask for that.",
           "I checked {what} {key}: it belongs to another customer, so I will not {purpose} for you.",
           "{what} {key} is registered to someone else; I can only change your own records, so I cannot {purpose}.")


def refusal_episode(ep: Episode, rng: random.Random) -> Episode:
    """The episode's customer asks to change a record of another customer (the first write's target, swapped for
    a row of the same entity another customer owns): the reference agent identifies them, reads that record, sees
    whose it is and refuses; nothing is written, and the rubric expects the database unchanged. Raises Unusable
    when the environment has no such row or no tool to read it."""
    domain = domain_for(ep.env)
    customer = json_field(ep.task["rubric"]).get("customer")
    write = next((c for c in ep.calls if domain.tools[c["name"]].is_write), None)
    if customer is None or write is None or not ep.calls or domain.tools[ep.calls[0]["name"]].is_write:
        raise Unusable("refusal: the episode has no identified customer and write")
    action = domain.spec.action(domain.tools[write["name"]].action)
    target = domain.spec.entity(action.target)
    getter = next((n for n in sorted(ep.env["tool_names"]) if domain.tools[n].kind == "get"
                   and domain.tools[n].entity == target.name), None)
    if getter is None or owner_path(domain, target.name) in (None, ()):
        raise Unusable(f"refusal: no tool reads a {target.name} another customer owns")
    engine = engine_from_bytes(bytes(ep.env["db"]))
    try:
        with engine.connect() as conn:
            others = [r[target.key] for r in Executor(domain).fetch(conn, target.name, "", None, None)
                      if owner_of(domain, conn, target.name, r[target.key]) not in (None, customer)]
    finally:
        engine.dispose()
    if not others:
        raise Unusable(f"refusal: every {target.name} belongs to the customer")
    other = rng.choice(others)
    what = (target.label or target.name.replace("_", " "))
    identify = ep.calls[0]
    facts = [f for f in json_field(ep.task["user_profile"])["facts"]
             if f["value"] in {render_value(v) for v in identify["arguments"].values()}]
    label = target.label or f"{target.name.replace('_', ' ')} id"
    intent = action.intent.format(**{**write["arguments"], target.key: other})
    stated = " ".join(f"My {f['label']} is {f['value']}." for f in facts)
    description = f"{rng.choice(OPENERS)} I would like to {intent}. {stated} The {label} is {other}."
    profile = {**json_field(ep.task["user_profile"]), "facts": [*facts, {"name": target.key, "label": label,
                                                                          "value": render_value(other)}]}
    calls = [identify, {"name": getter, "arguments": {target.key: other}}]
    purpose = _purpose(domain.tools[write["name"]])
    refusal = rng.choice(_REFUSE).format(what=what[0].upper() + what[1:], key=other, purpose=purpose)
    rubric = {**json_field(ep.task["rubric"]), "required_outputs": []}
    task = {**ep.task, "task_id": f"{ep.task['task_id']}-refusal", "description": description,
            "user_profile": json.dumps(profile), "golden_actions": json.dumps(calls), "rubric": json.dumps(rubric)}
    unchanged = replay(Environment(ep.env), {**task, "rubric": json.dumps({**rubric, "expected_diff": None})},
                       calls, refusal).info["diff"]
    task["rubric"] = json.dumps({**rubric, "expected_diff": json.loads(json.dumps(unchanged, default=str))})
    note = f"Before anything changes I check whose {what} {other} is."
    return Episode(ep.env, task, calls, notes={1: note}, refusal=refusal)


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


def episode_of(row: dict[str, Any]) -> Episode:
    """The episode of a verified trajectory row (its environment, task and successful calls), for augmentation."""
    vi = json_field(row["verify_input"])
    messages = json_field(row["messages"])
    results = {m.get("tool_call_id"): m for m in messages if m["role"] == "tool"}
    calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
             for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
             if not tool_failed(results.get(c.get("id"), {}))]
    return Episode({**vi["env"], "db": bytes(row["env_db"])}, dict(vi["task"]), calls)


# --- the reference agent's words ----------------------------------------------------------------------------
# Several phrasings per move, drawn by the row's seed, so the data teaches the reason and not one sentence.

_IDENTIFY = ("First I confirm who you are by your {label}.", "I identify your account first, by your {label}.",
             "Before anything changes I look you up by your {label}.")
_FEED = ("This gives the {what} for {nxt}.", "{nxt} needs the {what} this returns.",
         "I need the {what} for the next step.")
_CHECK = ("I check the {entity} before changing it: its status, and that it is yours.",
          "First a look at the {entity} as it stands, and whose it is.")
_LOOK = ("I read the {entity} before going on.", "A look at the {entity} first.")
_WRITE = ("Everything is in place, so I {purpose}.", "Now I can {purpose}.", "Next I {purpose}.")
_SOURCES = {"request": ("from your message", "as you wrote", "which you gave"),
            "user": ("as you told me", "from your answer"),
            "tool": ("from the {tool} result", "returned by {tool}", "as {tool} showed")}
_DONE = ("All done.", "That is taken care of.", "Your request is complete.", "Done.")


def _label(param: str) -> str:
    return param.replace("_", " ")


def _purpose(tool: Tool) -> str:
    """The tool's description up to its first clause, lower-cased: what the call does."""
    text = tool.description.split(". ")[0].split("; ")[0].rstrip(".")
    return text[0].lower() + text[1:]


def _source(value: Any, messages: list[dict[str, Any]], request: str, rng: random.Random) -> str:
    """Where a value was first seen, in words: the request, a user reply, or a tool result (named)."""
    texts = value_texts(value)
    if any(t in request for t in texts):
        return rng.choice(_SOURCES["request"])
    for m in messages[2:]:
        if any(t in str(m.get("content") or "") for t in texts):
            if m["role"] == "user":
                return rng.choice(_SOURCES["user"])
            if m["role"] == "tool":
                return rng.choice(_SOURCES["tool"]).format(tool=m.get("name") or "an earlier")
    return "from our conversation"


def reasoning(domain: CompiledDomain, calls: list[dict[str, Any]], k: int, messages: list[dict[str, Any]],
              request: str, rng: random.Random) -> str:
    """Why call ``k`` now and where each argument comes from, written from the graph: identifying the customer,
    what the next call needs of its result (an edge of the dependency graph), a check of the record a later write
    changes, or the write itself; then each argument's source. Phrasings are drawn by ``rng``."""
    call = calls[k]
    tool = domain.tools[call["name"]]
    entity = tool.entity.replace("_", " ")
    nxt = calls[k + 1]["name"] if k + 1 < len(calls) else None
    customer = domain.spec.customer_entity
    written = {(e, render_value(v)) for c in calls[k + 1:] if domain.tools[c["name"]].is_write
               for e, v in written_rows(domain, c["name"], c["arguments"])[:1]}
    key = domain.spec.entity(tool.entity).key
    if tool.is_write:
        why = rng.choice(_WRITE).format(purpose=_purpose(tool))
    elif customer is not None and tool.entity == customer.name and k == 0:
        why = rng.choice(_IDENTIFY).format(label=_label(next(iter(call["arguments"]), "details")))
    elif nxt is not None and domain.graph.has_edge(tool.name, nxt):
        types = sorted(domain.graph.edges[tool.name, nxt]["types"])
        what = " and ".join(t.split(".")[-1].replace("_", " ") for t in types)
        why = rng.choice(_FEED).format(what=what, nxt=nxt)
    elif (tool.entity, render_value(call["arguments"].get(key))) in written:
        why = rng.choice(_CHECK).format(entity=entity)
    else:
        why = rng.choice(_LOOK).format(entity=entity)
    args = "; ".join(f"{_label(p)} {render_value(v)} {_source(v, messages, request, rng)}"
                     for p, v in call["arguments"].items())
    return f"{why} {args[0].upper() + args[1:]}." if args else why


def _written(domain: CompiledDomain, name: str, content: dict[str, Any]) -> str:
    """What one write did, with the values it returned: the fields its effects set or adjusted on the target, and
    the records it created with their money fields."""
    action = domain.spec.action(domain.tools[name].action)
    target = domain.spec.entity(action.target)
    row = content.get(action.target) or {}
    fields = list(dict.fromkeys(e.field for e in action.effects if e.kind in ("set", "adjust") and e.row == "target"))
    changed = ", ".join(f"{f.replace('_', ' ')} {json.dumps(row[f]) if isinstance(row[f], bool) else render_value(row[f])}"
                        for f in fields if row.get(f) is not None)
    parts = [f"{target.name.replace('_', ' ')} {row.get(target.key, '')} now has {changed}".replace("  ", " ")
             if changed else f"{target.name.replace('_', ' ')} {row.get(target.key, '')} is updated"]
    for entity, created in (content.get("created") or {}).items():
        spec = domain.spec.entity(entity)
        money = ", ".join(f"{f.name.replace('_', ' ')} {render_value(created[f.name])}" for f in spec.fields
                          if f.type == "money" and created.get(f.name) is not None)
        parts.append(f"new {entity.replace('_', ' ')} {created.get(spec.key, '')}" + (f" with {money}" if money else ""))
    return "; ".join(parts)


def final_text(domain: CompiledDomain, messages: list[dict[str, Any]], rng: random.Random) -> str:
    """The closing message: what each write did, stated with the values its result returned."""
    results = {m.get("tool_call_id"): m for m in messages if m["role"] == "tool"}
    done = []
    for m in messages:
        for call in m.get("tool_calls") or [] if m["role"] == "assistant" else []:
            result = results.get(call["id"], {})
            name = call["function"]["name"]
            if domain.tools[name].is_write and not tool_failed(result):
                done.append(_written(domain, name, json.loads(result["content"])))
    if not done:
        return f"{rng.choice(_DONE)} Nothing needed to change."
    return f"{rng.choice(_DONE)} " + ". ".join(d[0].upper() + d[1:] for d in done) + "."


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


def play(ep: Episode, rng: random.Random, distractors: int = 4) -> Played:
    """Play the episode through the runtime with the profile-grounded user; raises Unusable unless it scores 1."""
    domain = domain_for(ep.env)
    runtime = Environment(ep.env)
    try:
        return _play(domain, runtime, ep, rng, distractors)
    finally:
        runtime.close()


def _play(domain: CompiledDomain, runtime: Environment, ep: Episode, rng: random.Random,
          distractors: int) -> Played:
    obs = runtime.reset(ep.task)
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
        out, reward, done, _ = runtime.step(message)
        names = [c["function"]["name"] for c in message.get("tool_calls") or []]
        for m, name in zip(out.messages, names, strict=False):
            m.setdefault("name", name)  # only for _source's wording; stripped below
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
            labels = " and ".join(f"your {f['label']}" for f in wanted)
            lead = f"{ep.plan}\n\n" if ep.plan and n_calls == 0 and len(messages) == 2 else ""
            question = f"{lead}To continue I need {labels}. Could you tell me?"
            slots.append(Slot(len(messages), "question", _teacher_prompt(
                "question", question, "a support agent asks the customer", tuple(f["label"] for f in wanted)),
                question, tuple(f["label"] for f in wanted)))
            [reply] = step({"role": "assistant", "content": question})
            values = tuple(f["value"] for f in wanted)
            if reply["role"] != "user" or not all(v in reply["content"] for v in values):
                raise Unusable(f"the user did not give {labels}")
            slots.append(Slot(len(messages) - 1, "reply", _teacher_prompt(
                "reply", reply["content"], "the customer answers the agent", values), reply["content"], values))
        if k in ep.retries and (wrong := _mistyped(call["arguments"])) is not None:
            text = f"Let me run {call['name']}."
            [result] = step(_call_message(n_calls, text, call["name"], wrong))
            n_calls += 1
            if not tool_failed(result):
                raise Unusable("the mistyped retry did not fail")
        text = reasoning(domain, ep.calls, k, messages, request, rng)
        if k in ep.retries:
            text = f"That call failed: I mistyped a value. {text}"
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
    final = ep.refusal or final_text(domain, messages, rng)
    outputs = tuple(str(v) for v in json_field(ep.task["rubric"])["required_outputs"])
    slots.append(Slot(len(messages), "final", _teacher_prompt(
        "final message", final, "a support agent reports the outcome", outputs), final, outputs))
    step({"role": "assistant", "content": final})
    if not done or reward != 1.0:
        raise Unusable(f"the played episode scores {reward} ({'ended' if done else 'not ended'})")
    for m in messages:
        m.pop("name", None)
    return Played(messages, slots, task_tools(ep.env, [c["name"] for c in ep.calls], distractors, rng))

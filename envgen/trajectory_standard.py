"""The trajectory standard: what every conversation a model is trained on holds to, whichever stage wrote it
(``small_envs``, every mid-training route, ``research_trajectories``), declared once as the checks of their
contract (``standard_contract``), so a regression in any stage is quarantined by the same check.

Beyond re-verification (``envgen.trajectory_checks``), a trajectory

- acts for one customer, identified with the tools before the first write;
- grounds every argument it passes in an earlier message or tool result (a research search's query is the
  model's own words; its document ids are checked);
- reads nothing it already knows, and states the outcome;
- never has the user state, or the agent ask for, an internal key: people know emails, names, dates, amounts and
  the codes they were given (``customer_facing``), and the agent finds every other key with the tools;
- ends with a final message that is true of the database: no record is said to have changed that did not, every
  amount is one the database holds, no total is one unit's price for several units, and no write acts on an event
  dated before the database's now;
- has tool results that inform (a record, never an echo of the call's arguments or a bare ``ok``);
- compares only alternatives the conversation offers (tools it was offered, ids it has seen), each rejected for a
  reason true of it;

and the stages one reference agent writes (``small_envs``, the mid-training routes) are varied: their ten most common
sentence frames cover at most ``MAX_FRAME_SHARE`` of their assistant sentences (``VARIED_SENTENCES``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import polars as pl
from sqlalchemy import select

from data_contracts.schemas import between, in_set
from data_contracts.stage import Check
from envgen.checks import contradicting_owners
from envgen.compiler import CompiledDomain
from envgen.domain_spec import DomainSpec, customer_facing
from envgen.environment import json_field
from envgen.records import TRAJECTORY
from envgen.seeding import engine_from_bytes
from envgen.tools import Executor, call_tool, render_value
from envgen.trajectory_checks import (
    EXECUTION,
    RESEARCH,
    SCHEMA,
    SUMMARY_TAG,
    Message,
    call_arguments,
    calls_invalid,
    execution_parts,
    needless_read,
    other_customer_write,
    tool_failed,
    unidentified_write,
    unstated_outcome,
    value_texts,
    verify_row,
)
from envgen.wording import MAX_FRAME_SHARE, MIN_FRAMED_SENTENCES, TOP_FRAMES, frame_share

# --- sentence frames ----------------------------------------------------------------------------------------


def role_texts(messages: Sequence[Message], role: str) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == role and m.get("content")]


def repetitive(frame: pl.DataFrame) -> list[bool]:
    """Every row when the output's ten most common assistant sentence frames cover more than MAX_FRAME_SHARE of
    its assistant sentences (judged from MIN_FRAMED_SENTENCES on): the output as a whole teaches one template."""
    texts = [t for m in frame["messages"].to_list() for t in role_texts(json_field(m), "assistant")]
    share, total, _ = frame_share(texts)
    return [total >= MIN_FRAMED_SENTENCES and share > MAX_FRAME_SHARE] * frame.height


# --- arguments grounded in the conversation ------------------------------------------------------------------

_ID_NAME = re.compile(r"(^|_)(id|ids)$")


def is_id_name(name: str) -> bool:
    """An argument naming a record by its key: ``id``, ``doc_id``, ``reservation_id``."""
    return bool(_ID_NAME.search(name))


def _calls(messages: Sequence[Message]) -> list[tuple[int, dict[str, Any], dict[str, Any], str]]:
    """(message index, call, arguments, result content) of every tool call the environment did not refuse."""
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    out = []
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            result = results.get(call.get("id"), "")
            if tool_failed({"content": result}):
                continue
            try:
                arguments = call_arguments(call)
            except (json.JSONDecodeError, TypeError):
                continue
            out.append((i, call, arguments, result))
    return out


def ungrounded_argument(row: Mapping[str, Any]) -> str | None:
    """An argument whose value no earlier user message or tool result holds (the system prompt does not count:
    the agent must not take a value from its instructions). A research search's query is the model's own words,
    so only the ids a research call passes are checked."""
    messages = json_field(row["messages"])
    research = str(row.get("verifier") or "").startswith(RESEARCH)
    for i, call, arguments, _ in _calls(messages):
        seen = "\n".join(str(m.get("content") or "") for m in messages[1:i])
        for name, value in arguments.items():
            if value is None or (research and not is_id_name(name)):
                continue
            if not any(t in seen for t in value_texts(value)):
                return f"message {i}: {call['function']['name']} passes {name}={render_value(value)}, which no " \
                       "earlier message states or returns"
    return None


def repeated_call(row: Mapping[str, Any]) -> str | None:
    """A read repeated with the same arguments (what it returns is known already). Environment rows are held to
    the stricter ``needless_read``."""
    if row.get("verifier") == EXECUTION:
        return needless_read(row)
    seen = set()
    for i, call, arguments, _ in _calls(json_field(row["messages"])):
        key = (call["function"]["name"], json.dumps(arguments, sort_keys=True))
        if key in seen:
            return f"message {i}: {key[0]} is called again with the same arguments"
        seen.add(key)
    return None


def stated_nothing(row: Mapping[str, Any]) -> str | None:
    """The conversation ends without an assistant message saying something (every verifier), or an environment
    or procedure row's final message states no value the writes (the last step) returned."""
    messages = json_field(row["messages"])
    if not messages or messages[-1].get("role") != "assistant" or not str(messages[-1].get("content") or "").strip():
        return "the conversation does not end with the agent stating the outcome"
    return unstated_outcome(row)


# --- what a person knows ------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _internal_keys(spec_json: str, db: bytes) -> frozenset[str]:
    from envgen.compiler import compile_domain

    domain = compile_domain(DomainSpec.model_validate_json(spec_json))
    engine = engine_from_bytes(db)
    try:
        with engine.connect() as conn:
            return frozenset(str(k) for ent in domain.spec.entities
                             for (k,) in conn.execute(select(domain.tables[ent.name].c[ent.key])) if k is not None)
    finally:
        engine.dispose()


def internal_keys(domain: CompiledDomain, db: bytes) -> frozenset[str]:
    """Every key of the database (each entity's key values: never what a customer knows)."""
    return _internal_keys(domain.spec.model_dump_json(), bytes(db))


def internal_key_labels(spec: DomainSpec) -> set[str]:
    """How a conversation names a key: each entity's label, "<entity> id", its key's name and the labels of
    relations to it."""
    labels: set[str] = set()
    for ent in spec.entities:
        labels |= {f"{ent.name.replace('_', ' ')} id", ent.key.replace("_", " ")}
        if ent.label:
            labels.add(ent.label)
        labels |= {r.label for other in spec.entities for r in other.relations if r.to == ent.name and r.label}
    return {label.lower() for label in labels}


def customer_facing_labels(spec: DomainSpec) -> set[str]:
    """How a conversation names what a customer knows: the labels (or names) of customer-facing fields."""
    return {(f.label or f.name.replace("_", " ")).lower() for e in spec.entities for f in e.fields
            if customer_facing(spec, e.name, f.name)}


_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*[A-Za-z0-9]")


def internal_key_told(row: Mapping[str, Any]) -> str | None:
    """A user message that states an internal key, or an agent question that asks for one. For an environment
    row the keys are the database's; for a procedure (no database) they are the id arguments' values."""
    messages = json_field(row["messages"])
    users = [(i, str(m.get("content") or "")) for i, m in enumerate(messages) if m.get("role") == "user"]
    if row.get("verifier") == EXECUTION and (parts := execution_parts(row)) is not None:
        domain = parts[0]
        keys = internal_keys(domain, bytes(row["env_db"]))
        labels = internal_key_labels(domain.spec)
        known = customer_facing_labels(domain.spec)
        for i, m in enumerate(messages):
            text = str(m.get("content") or "").lower()
            if m.get("role") == "assistant" and not m.get("tool_calls") and "?" in text:
                # "your policy" is asked, "your policy number" (a field the customer holds) is not
                asked = sorted(label for label in labels if re.search(rf"\byour {re.escape(label)}\b", text)
                               and not any(k.startswith(label) and re.search(rf"\byour {re.escape(k)}\b", text)
                                           for k in known - {label}))
                if asked:
                    return f"message {i}: the agent asks for an internal key ({asked[0]})"
    elif row.get("verifier") == SCHEMA:
        keys = {render_value(v) for _, _, arguments, _ in _calls(messages) for name, v in arguments.items()
                if is_id_name(name) and v is not None}
    else:
        return None
    for i, text in users:
        told = sorted(set(_TOKEN.findall(text)) & keys)
        if told:
            return f"message {i}: the user states internal key {told[0]}"
    return None


# --- finals that are true of the database --------------------------------------------------------------------

_FIGURE = re.compile(r"(?<![\w.])\d+\.\d{2}(?![\d])")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_CLAUSE = re.compile(r"(?<=[.;!?])\s+|\n+")


def replayed_writes(domain: CompiledDomain, db: bytes, calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each successful write of ``calls`` replayed in order on a copy of ``db``: its call, the target row before
    and after, the created records, and every row it names (the target, reference parameters and related rows its
    effects change) as it stood before (``named``) and after (``after_named``)."""
    engine = engine_from_bytes(db)
    ex = Executor(domain)
    out = []
    try:
        for call in calls:
            tool = domain.tools.get(call["name"])
            if tool is None or not tool.is_write:
                call_tool(ex, engine.begin, call["name"], call["arguments"], domain.spec.now)
                continue
            action = domain.spec.action(tool.action)
            target = domain.spec.entity(action.target)
            key = call["arguments"].get(target.key)
            with engine.connect() as conn:
                row = ex.get(conn, target.name, key) or {}
                # the target, each reference parameter's row, and each related row an effect changes
                named = [(target.name, key)] + [(q.ref, call["arguments"].get(q.name)) for q in action.params if q.ref]
                named += [(r.to, row.get(r.field)) for r in target.relations
                          if any(e.kind != "create" and e.row == r.field for e in action.effects)]
                before = {(e, k): ex.get(conn, e, k) for e, k in named if k is not None}
            result = call_tool(ex, engine.begin, call["name"], call["arguments"], domain.spec.now)
            if not result.ok:
                continue
            with engine.connect() as conn:
                after = {(e, k): ex.get(conn, e, k) for e, k in before}
            out.append({"call": call, "action": action, "target": target.name, "key": key,
                        "before": before.get((target.name, key)), "after": after.get((target.name, key)),
                        "named": before, "after_named": after,
                        "created": dict(result.content.get("created") or {})})
    finally:
        engine.dispose()
    return out


def _executed_calls(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [{"name": call["function"]["name"], "arguments": arguments} for _, call, arguments, _ in _calls(messages)]


def unit_price_totals(spec: DomainSpec) -> dict[tuple[str, str], tuple[str, str]]:
    """(action, created field) -> (entity, count field) for a create effect that copies one unit's price into a
    total while the record it creates counts several units (nights, travellers) from a parameter: a total that is
    one night's rate for a 13-night stay."""
    out = {}
    for action in spec.actions:
        counts = {q.name for q in action.params if q.type == "int"}
        for effect in action.effects:
            if effect.kind != "create":
                continue
            for field, operand in effect.values.items():
                if "total" not in field or operand.ref is None or operand.per is not None:
                    continue
                # the copied price is per unit of a counted field: nightly_rate and nights, session_rate and sessions
                price = operand.ref.split(".")[-1]
                units = [f for f, o in effect.values.items() if o.param in counts and f.rstrip("s") in price]
                if units:
                    out[(action.name, field)] = (effect.entity, units[0])
    return out


def untrue_final(row: Mapping[str, Any]) -> str | None:
    """The final message of an environment row says what is not so: a record it names as changed did not change
    (its clause names no record the write created), an amount it states is one neither a tool returned nor the
    database holds in a row the writes named, or a total it reports is one unit's price for several units."""
    parts = execution_parts(row)
    if parts is None:
        return None
    domain, messages, _ = parts
    final = str(messages[-1].get("content") or "") if messages and messages[-1].get("role") == "assistant" else ""
    writes = replayed_writes(domain, bytes(row["env_db"]), _executed_calls(messages))
    created_keys = {render_value(rec[domain.spec.entity(e).key]) for w in writes for e, rec in w["created"].items()}
    clauses = _CLAUSE.split(final)
    for w in writes:
        key = render_value(w["key"])
        if w["before"] == w["after"] and any(re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", c)
                                             and not any(k in c for k in created_keys) for c in clauses):
            return f"the final message says {w['target'].replace('_', ' ')} {key} changed; {w['call']['name']} " \
                   "left it as it was"
    held = {round(float(f), 2) for m in messages if m.get("role") == "tool" for f in _NUMBER.findall(str(m["content"]))}
    held |= {round(float(v), 2) for w in writes for rows in (w["after_named"].values(), w["created"].values())
             for record in rows for v in (record or {}).values()
             if isinstance(v, int | float) and not isinstance(v, bool)}
    invented = [f for f in _FIGURE.findall(final) if round(float(f), 2) not in held]
    if invented:
        return f"the final message states {invented[0]}, a figure the database does not hold"
    return per_unit_total(domain, writes)


def per_unit_total(domain: CompiledDomain, writes: Sequence[Mapping[str, Any]]) -> str | None:
    """A record the replayed ``writes`` created whose total is one unit's price for several units."""
    per_unit = unit_price_totals(domain.spec)
    for w in writes:
        for entity, record in w["created"].items():
            for (action, field), (unit_entity, count) in per_unit.items():
                if action == w["action"].name and unit_entity == entity and (record.get(count) or 0) > 1:
                    return (f"{entity.replace('_', ' ')} {record.get(domain.spec.entity(entity).key)} has a "
                            f"{field} of one unit's price for {record[count]} {count}")
    return None


def future_fields(spec: DomainSpec) -> set[tuple[str, str]]:
    """(entity, field) of dates the domain requires to lie after now for some action (a departure, an event
    date, a class start): what an upcoming thing's date is."""
    out = set()
    for action in spec.actions:
        rows = _condition_entities(spec, action)
        for c in [*action.preconditions, *(c for p in spec.policies if action.name in p.actions for c in p.conditions)]:
            if c.now and c.op == "gt" and c.days >= 0 and c.row in rows:
                out.add((rows[c.row], c.field))
    return out


def _condition_entities(spec: DomainSpec, action: Any) -> dict[str, str]:
    """How an action's conditions name rows ('target', a ref parameter, a relation of the target) -> entity."""
    target = spec.entity(action.target)
    rows = {"target": target.name, **{q.name: q.ref for q in action.params if q.ref}}
    rows.update({r.field: r.to for r in target.relations})
    return rows


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if "T" in str(value) else datetime.fromisoformat(f"{value}T23:59:59")
    except ValueError:
        return None


def past_event_write_of(domain: CompiledDomain, writes: Sequence[Mapping[str, Any]]) -> str | None:
    """A replayed write acting on a record whose upcoming date (``future_fields``) lies before the database's
    now, when the action itself says nothing about that date (checking in to a booking whose time has come is
    meant)."""
    spec = domain.spec
    upcoming = future_fields(spec)
    for w in writes:
        own = {(_condition_entities(spec, w["action"]).get(c.row), c.field) for c in w["action"].preconditions}
        own |= {(_condition_entities(spec, w["action"]).get(c.row), c.field) for p in spec.policies
                if w["action"].name in p.actions for c in p.conditions}
        for (entity, key), record in w["named"].items():
            for ent, field in upcoming - own:
                when = _time(record.get(field)) if record is not None and ent == entity else None
                if when is not None and when < spec.now:
                    return (f"{w['call']['name']} acts on {entity.replace('_', ' ')} {key}, whose {field.replace('_', ' ')}"
                            f" {record[field]} is before now ({spec.now.isoformat()})")
    return None


def past_event_write(row: Mapping[str, Any]) -> str | None:
    parts = execution_parts(row)
    if parts is None:
        return None
    return past_event_write_of(parts[0], replayed_writes(parts[0], bytes(row["env_db"]), _executed_calls(parts[1])))


def untrue_world(domain: CompiledDomain, db: bytes, calls: Sequence[dict[str, Any]]) -> str | None:
    """What no final message about ``calls`` could state truly: a write on an event dated before now, or a total
    of one unit's price for several units (a task to sample again, before anything is played)."""
    writes = replayed_writes(domain, db, calls)
    return past_event_write_of(domain, writes) or per_unit_total(domain, writes)


# --- results that inform ------------------------------------------------------------------------------------


def _leaves(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _leaves(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _leaves(v)]
    return [] if obj is None or isinstance(obj, bool) else [render_value(obj)]


def uninformative_result(row: Mapping[str, Any]) -> str | None:
    """A tool result that tells nothing new: a bare acknowledgement, or only values the call was given (a
    step-compressed summary is exempt: it keeps what later turns use, and the replay checks it)."""
    for i, call, arguments, result in _calls(json_field(row["messages"])):
        if result.startswith(SUMMARY_TAG):
            continue  # step compression keeps only what later turns use; the replay checks it against the result
        try:
            content = json.loads(result)
        except json.JSONDecodeError:
            continue  # prose (a page of text) is information
        given = {render_value(v) for v in _leaves(arguments)}
        if not set(_leaves(content)) - given:
            return f"message {i}: the result of {call['function']['name']} only echoes its arguments"
    return None


# --- alternatives the conversation offers --------------------------------------------------------------------

_OPTION = re.compile(r"^\s*\d+\.\s+`?(?P<tool>[a-z][a-z0-9_]*)`?(?P<rest>[^\n]*)$", re.MULTILINE)
_WITH_ID = re.compile(r"^ with (?:[a-z ]+ )?(?P<id>[A-Za-z0-9][A-Za-z0-9_-]*[0-9A-Z][A-Za-z0-9_-]*)\b")
_OTHER_OWNER = "another customer"


@dataclass(frozen=True)
class Candidate:
    """A rejected candidate of an assistant message: a numbered line naming one of the domain's tools."""

    message: int
    tool: str
    row: str | None  # the record it would act on ("with reservation id R9"), if it names one
    offered: bool  # the tool is among the row's offered tools
    seen: bool  # the record's id appears in an earlier message
    text: str


def rejected_candidates(row: Mapping[str, Any]) -> list[Candidate]:
    """Every rejected candidate of an environment row's assistant messages."""
    parts = execution_parts(row)
    if parts is None:
        return []
    domain, messages, _ = parts
    offered = {t["function"]["name"] for t in json_field(row["tools"])}
    out = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        seen = "\n".join(str(x.get("content") or "") for x in messages[1:i])
        for option in _OPTION.finditer(str(m.get("content") or "")):
            if option["tool"] not in domain.tools:
                continue
            found = _WITH_ID.match(option["rest"])
            key = found["id"] if found else None
            out.append(Candidate(i, option["tool"], key, option["tool"] in offered, key is None or key in seen,
                                 option["rest"]))
    return out


def invented_alternative(row: Mapping[str, Any]) -> str | None:
    """A rejected candidate the conversation does not offer: a tool the row does not offer, an id no earlier
    message holds, or "another customer" said of a record the acting customer owns."""
    candidates = rejected_candidates(row)
    for c in candidates:
        if not c.offered:
            return f"message {c.message}: the candidate {c.tool} is not among the tools offered"
        if not c.seen:
            return f"message {c.message}: the candidate row {c.row} appears nowhere earlier in the conversation"
    claimed = [c for c in candidates if c.row is not None and _OTHER_OWNER in c.text]
    if not claimed:
        return None
    from envgen.customers import owner_of

    domain, _, vi = execution_parts(row)
    customer = (json_field(vi["task"]["rubric"]) or {}).get("customer")
    engine = engine_from_bytes(bytes(row["env_db"]))
    try:
        with engine.connect() as conn:
            for c in claimed:
                if owner_of(domain, conn, domain.tools[c.tool].entity, c.row) in (None, customer):
                    return f"message {c.message}: {c.row} is said to belong to another customer, and does not"
    finally:
        engine.dispose()
    return None


# --- the contract -------------------------------------------------------------------------------------------


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return list(frame.iter_rows(named=True))


def _habit(problem: Callable[[Mapping[str, Any]], str | None]) -> Callable[[pl.DataFrame], list[bool]]:
    return lambda frame: [problem(row) is not None for row in _rows(frame)]


def _bad_calls(frame: pl.DataFrame) -> list[bool]:
    return [calls_invalid(json_field(r["messages"]), json_field(r["tools"]), r["train"]) is not None
            for r in _rows(frame)]


def _bad_mask(frame: pl.DataFrame) -> list[bool]:
    bad = []
    for r in _rows(frame):
        roles = [m.get("role") for m in json_field(r["messages"])]
        flags = list(r["train"] or [])
        bad.append(len(flags) != len(roles) or any(f and role != "assistant" for f, role in zip(flags, roles))
                   or not any(flags))
    return bad


def _lineage(frame: pl.DataFrame) -> list[bool]:
    return [(r["parent_id"] is None) != (r["transform"] is None) or r["parent_id"] == r["id"] for r in _rows(frame)]


@dataclass(frozen=True)
class Habit:
    """A row-level property of the standard: ``problem(row)`` says why a row breaks it (None when it holds)."""

    name: str
    problem: Callable[[Mapping[str, Any]], str | None]
    description: str


HABITS = (
    Habit("one_customer", other_customer_write,
          "every write names records of the task's one acting customer (or shared ones)"),
    Habit("identified_before_write", unidentified_write,
          "the acting customer is identified with the tools before the first write"),
    Habit("arguments_grounded", ungrounded_argument,
          "every argument (a research call's ids) is stated or returned in an earlier message"),
    Habit("no_needless_read", repeated_call, "no read looks up what the user stated or an earlier result returned"),
    Habit("outcome_stated", stated_nothing,
          "the agent ends by stating the outcome, with a value the writes (or the last step) returned"),
    Habit("no_internal_key", internal_key_told,
          "no user message states, and no agent question asks for, an internal key"),
    Habit("final_true", untrue_final, "the final message claims no change that did not happen, states only "
          "amounts the database holds, and no total of one unit's price for several units"),
    Habit("dates_after_now", past_event_write,
          "no write acts on an upcoming record (an event, a departure) dated before the database's now"),
    Habit("results_inform", uninformative_result,
          "every tool result holds something its call was not given (no bare ok, no echo)"),
    Habit("alternatives_from_conversation", invented_alternative,
          "rejected candidates are offered tools and ids seen earlier, rejected for true reasons"),
)

TRAJECTORY_CHECKS = (
    Check("reverifies", _habit(verify_row), description="every row re-verifies by its verifier (execution replays it)"),
    Check("tool_calls_valid", _bad_calls, description="trained turns' tool calls are JSON matching the schemas"),
    Check("masks_on_assistant_turns", _bad_mask,
          description="one train flag per message, true only on assistant turns, at least one trained turn"),
    Check("lineage_consistent", _lineage, description="a transform names its parent; an original has neither"),
    Check("one_owner_per_record", contradicting_owners,
          description="every relation path from a record of env_db to the customer entity reaches one customer"),
    *(Check(h.name, _habit(h.problem), description=h.description) for h in HABITS),
)

VARIED_SENTENCES = Check("varied_sentences", repetitive, description=f"the {TOP_FRAMES} most common sentence frames "
                         f"cover at most {MAX_FRAME_SHARE:.0%} of the output's assistant sentences")
"""The diversity check of the outputs one reference agent writes (small_envs and the mid-training routes); a
research trajectory's words are its harness's."""


def standard_contract(sources: Sequence[str], min_rows: int = 0, checks: Sequence[Check] = ()) -> Any:
    """The contract of every trajectory output: the record's columns, the standard's checks, then ``checks``
    (a stage's own)."""
    return TRAJECTORY.contract(  # an unknown verifier fails ``reverifies``
        expectations=(in_set("source", list(sources)), in_set("verified", [True]), between("tokens", min_value=1)),
        checks=(*TRAJECTORY_CHECKS, *checks), min_rows=min_rows)


def habit_problem(row: Mapping[str, Any]) -> str | None:
    """The first habit ``row`` breaks, as 'check: reason'; None when it keeps them all. A stage sets such a row
    aside (``rejected``) rather than have the whole output quarantined for it."""
    for habit in HABITS:
        if (reason := habit.problem(row)) is not None:
            return f"{habit.name}: {reason}"
    return None

"""Trajectory rows: turn-level masks, tool-call validation, teacher slots, and the verifiers that re-check a row on
its own (the `trajectory` record's ``verify_input`` and ``env_db`` carry what they need).

Verifiers, named in the row's ``verifier`` column:

- ``execution``: the conversation is replayed in the environment on a fresh copy of ``env_db``:
  every tool result must be what the tool really returns (a summarized one may only keep values it returned), every
  argument of a call must appear in an earlier message (the request, a user reply or a tool result), and the
  final database state and the told outputs must pass the task's rubric (reward 1);
- ``schema``: every tool schema is a valid JSON Schema, every call names an offered tool with arguments that
  conform to it, and every argument value appears in an earlier message;
- ``two_way+completeness``: the final answer scores 1 under the two-way reward, and every condition of the
  question is stated in the reasoning (LongCat-Flash-Thinking-2601 3.1.2, "reasoning completeness").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from envgen.compiler import CompiledDomain
from envgen.customers import customer_policy_problem, owner_of, written_rows
from envgen.environment import Environment, domain_for, json_field
from envgen.rewards import extract_boxed, score_two_way
from envgen.seeding import engine_from_bytes
from envgen.tools import render_value, spoken

EXECUTION = "execution"
SCHEMA = "schema"
ANSWER = "two_way+completeness"
RESEARCH = "research harness filters: role identity, tool-call/response closure, artifact validity"
"""The deep-research harness's filters (inference/research/trajectories.py); a row's verifier names its role after
it. They need the search index, so a consumer re-verifies such a row by its trained tool calls against its
schemas."""
VERIFIERS = (EXECUTION, SCHEMA, ANSWER, RESEARCH)

SUMMARY_TAG = "[summarized earlier result] "
"""Prefix of a tool message that step compression replaced by a summary (``tasks.midtrain.sft_set``)."""

Message = dict[str, Any]


# --- teacher slots --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """A text of a trajectory a teacher may write: message ``index`` gets it (as its content). ``default`` is the
    reference text written from the graph; ``keep`` are values the text must hold verbatim (the facts a user
    states, the outputs the agent reports), so a rewrite never breaks derivability or the rubric."""

    index: int
    kind: str  # request | reply | question | reasoning | final
    prompt: str
    default: str
    keep: tuple[str, ...] = ()


def slot_problem(slot: Slot, text: str) -> str | None:
    """What makes ``text`` unusable for ``slot``; None when it is fine."""
    if not isinstance(text, str) or not text.strip():
        return f"{slot.kind} text is empty"
    if "<tool_call>" in text or "<|im_" in text:
        return f"{slot.kind} text holds chat or tool-call markup"
    lost = [v for v in slot.keep if v not in text]
    if lost:
        return f"{slot.kind} text drops {', '.join(repr(v) for v in lost[:3])}"
    return None


def apply_texts(messages: Sequence[Message], slots: Sequence[Slot], texts: Sequence[str]) -> list[Message]:
    """A copy of ``messages`` with each slot's message content replaced by its text."""
    out = [dict(m) for m in messages]
    for slot, text in zip(slots, texts, strict=True):
        out[slot.index]["content"] = text.strip()
    return out


# --- tool calls and masks -------------------------------------------------------------------------------------


@cache
def _validator(schema_json: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema_json))


def schema_problem(tool: Mapping[str, Any]) -> str | None:
    """Whether an OpenAI function schema is well formed: a name and a valid JSON Schema object for parameters."""
    from jsonschema import Draft202012Validator, SchemaError

    fn = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
        return "a tool schema without a function name"
    params = fn.get("parameters", {"type": "object"})
    if not isinstance(params, Mapping) or params.get("type") != "object":
        return f"tool {fn['name']}: parameters must be a JSON Schema of type object"
    try:
        Draft202012Validator.check_schema(params)
    except SchemaError as exc:
        return f"tool {fn['name']}: invalid JSON Schema: {exc.message}"
    return None


def call_problem(call: Mapping[str, Any], tools: Sequence[Mapping[str, Any]]) -> str | None:
    """What is wrong with one OpenAI tool call against the offered schemas: arguments not a JSON object, an
    unknown tool, or arguments that do not conform (missing, extra or mistyped values)."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        return "a tool call without a function"
    schemas = {t["function"]["name"]: t["function"] for t in tools}
    name, raw = fn.get("name"), fn.get("arguments")
    if name not in schemas:
        return f"unknown tool {name!r}"
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        return f"arguments of {name} are not valid JSON ({exc.msg})"
    if not isinstance(args, dict):
        return f"arguments of {name} are not a JSON object"
    errors = sorted(_validator(json.dumps(schemas[name].get("parameters", {}), sort_keys=True)).iter_errors(args),
                    key=lambda e: list(e.path))
    return f"arguments of {name} do not conform: {errors[0].message}" if errors else None


def call_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    raw = call["function"].get("arguments")
    return json.loads(raw) if isinstance(raw, str) else dict(raw or {})


def tool_failed(message: Message) -> bool:
    """A tool message reporting an error (the environment's ``{"error": ...}``, the agent loop's ``Error: ...``)."""
    content = str(message.get("content") or "")
    if content.startswith("Error:"):
        return True
    try:
        parsed = json.loads(content)
    except json.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and "error" in parsed


def turn_mask(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> list[bool]:
    """The turn-level loss mask (LongCat-Flash-Thinking-2601 3.1.2, "turn-level loss masking"): only assistant
    turns are trained, and not those with a format violation (a malformed or non-conforming call, leftover
    tool-call markup, nothing said) or a call the environment answered with an error; the context stays whole."""
    results: dict[str, Message] = {m.get("tool_call_id", ""): m for m in messages if m.get("role") == "tool"}
    mask = []
    for m in messages:
        if m.get("role") != "assistant":
            mask.append(False)
            continue
        calls = m.get("tool_calls") or []
        content = str(m.get("content") or "")
        bad_format = "<tool_call>" in content or (not calls and not content.strip())
        bad_call = any(call_problem(c, tools) for c in calls)
        failed = any(tool_failed(results.get(c.get("id", ""), {})) for c in calls)
        mask.append(not (bad_format or bad_call or failed))
    return mask


def value_texts(value: Any) -> set[str]:
    """How a value may appear in a conversation: as records render it, as JSON renders it and as a person says it."""
    return {render_value(value), spoken(value), json.dumps(value) if not isinstance(value, str) else value}


def underivable(messages: Sequence[Message], upto: int, args: Mapping[str, Any]) -> list[str]:
    """Arguments whose value appears in no message before ``upto`` (system, request, user replies, tool results)."""
    seen = "\n".join(str(m.get("content") or "") for m in messages[:upto])
    return [f"{k}={render_value(v)}" for k, v in args.items()
            if v is not None and not any(t in seen for t in value_texts(v))]


# --- steps with a reason ----------------------------------------------------------------------------------------


def _checks_written(domain: CompiledDomain, tool: Any, result: str, later: Sequence[Mapping[str, Any]]) -> bool:
    """The result is the one record a later write changes (its target): reading it is a check before changing it.
    A list that holds it among others is no such check."""
    key = domain.spec.entity(tool.entity).key
    written = {(e, render_value(k)) for c in later if c["name"] in domain.tools and domain.tools[c["name"]].is_write
               for e, k in written_rows(domain, c["name"], c["arguments"])[:1]}
    shown = value_texts_in(result, key)
    return len(shown) == 1 and (tool.entity, next(iter(shown))) in written


def value_texts_in(result: str, key: str) -> set[str]:
    """The values of ``key`` in a rendered tool result (a row, or a list of rows under ``results``), whole or as
    step compression summarized it."""
    try:
        content = json.loads(result.removeprefix(SUMMARY_TAG))
    except json.JSONDecodeError:
        return set()
    rows = content.get("results") if isinstance(content, dict) and "results" in content else [content]
    return {render_value(r[key]) for r in rows or [] if isinstance(r, dict) and r.get(key) is not None}


def needless_reads(domain: CompiledDomain, calls: Sequence[Mapping[str, Any]], results: Sequence[str],
                   said: Sequence[str]) -> list[int]:
    """Indices of read calls without a reason (``said[k]``: what the user said before call k):

    - every value later calls take from the result (an id, a code) was already stated by the user, returned by an
      earlier call, or is the call's own input (a read that hands back what it was given);
    - or it returns only records an earlier call returned (a second look at the same customer);

    unless the result is the record a later write changes (reading that is a check before changing it)."""
    out, returned, seen = [], "", set()
    for k, (call, result) in enumerate(zip(calls, results, strict=True)):
        tool = domain.tools.get(call["name"])
        rows: set[tuple[str, str]] = set()
        if tool is not None and not tool.is_write:
            rows = {(tool.entity, v) for v in value_texts_in(result, domain.spec.entity(tool.entity).key)}
            own = {v for v in call["arguments"].values() if isinstance(v, str)}
            later = [v for c in calls[k + 1:] for v in c["arguments"].values() if isinstance(v, str) and len(v) > 2]
            supplied = [v for v in later if v in result]
            known = all(v in said[k] or v in returned or v in own for v in supplied)
            if ((supplied and known) or (rows and rows <= seen and known)) \
                    and not _checks_written(domain, tool, result, calls[k + 1:]):
                out.append(k)
                continue
        returned += "\n" + result
        seen |= rows
    return out


def episode_steps(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """A conversation's successful calls ({"name", "arguments"}), their results, and what the user had said
    before each (the request and the replies), as ``needless_reads`` takes them."""
    results = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    calls, outs, said, user = [], [], [], ""
    for m in messages:
        if m.get("role") == "user":
            user += "\n" + str(m.get("content") or "")
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            result = results.get(call.get("id"), "")
            if tool_failed({"content": result}):
                continue
            try:
                arguments = call_arguments(call)
            except (json.JSONDecodeError, TypeError):
                continue
            calls.append({"name": call["function"]["name"], "arguments": arguments})
            outs.append(result)
            said.append(user)
    return calls, outs, said


# --- habits a trajectory teaches (checks of the trajectory contract) ---------------------------------------------


def execution_parts(row: Mapping[str, Any]) -> tuple[CompiledDomain, list[Message], dict[str, Any]] | None:
    if row.get("verifier") != EXECUTION or row.get("env_db") is None:
        return None
    vi = json_field(row.get("verify_input")) or {}
    if "env" not in vi or "task" not in vi:
        return None
    return domain_for(vi["env"]), json_field(row["messages"]), vi


def _tool_log(domain: CompiledDomain, messages: Sequence[Message], customer: str | None = None) -> list[dict[str, Any]]:
    """The environment's tool log as a conversation shows it: each call with its arguments, parsed result and
    whether it wrote. A step-compressed read of the customer entity stands for the acting ``customer``: its
    summary keeps only what later turns use, and the replay (the ``reverifies`` check) saw the real result."""
    calls, results, _ = episode_steps(messages)
    entity = domain.spec.customer_entity
    log = []
    for call, result in zip(calls, results, strict=True):
        tool = domain.tools.get(call["name"])
        try:
            content = json.loads(result.removeprefix(SUMMARY_TAG))
        except json.JSONDecodeError:
            content = {}
        if result.startswith(SUMMARY_TAG) and customer is not None and entity is not None and tool is not None \
                and tool.entity == entity.name:
            content = {**content, entity.key: customer} if isinstance(content, dict) else {entity.key: customer}
        log.append({"name": call["name"], "arguments": call["arguments"], "ok": True,
                    "wrote": bool(tool is not None and tool.is_write), "content": content})
    return log


def _with_db(row: Mapping[str, Any], fn: Any) -> Any:
    engine = engine_from_bytes(bytes(row["env_db"]))
    try:
        with engine.connect() as conn:
            return fn(conn)
    finally:
        engine.dispose()


def other_customer_write(row: Mapping[str, Any]) -> str | None:
    """A write naming a record another customer than the task's acting one owns (one owner per write set)."""
    parts = execution_parts(row)
    if parts is None:
        return None
    domain, messages, vi = parts
    customer = (json_field(vi["task"]["rubric"]) or {}).get("customer")
    writes = [e for e in _tool_log(domain, messages) if e["wrote"]]

    def owners(conn: Any) -> set[str]:
        return {o for e in writes for entity, key in written_rows(domain, e["name"], e["arguments"])
                if (o := owner_of(domain, conn, entity, key)) is not None}

    found = _with_db(row, owners) if writes else set()
    if len(found) > 1 or (customer is not None and found - {customer}):
        return (f"the writes touch records of customer(s) {', '.join(sorted(found - {customer}))}, not only of "
                f"the acting customer {customer}")
    return None


def unidentified_write(row: Mapping[str, Any]) -> str | None:
    """A write before the acting customer was identified with the tools, or on a record not theirs (in a domain
    with a customer entity, whether or not the task names its acting customer)."""
    parts = execution_parts(row)
    if parts is None:
        return None
    domain, messages, vi = parts
    if domain.spec.customer_entity is None:
        return None
    customer = (json_field(vi["task"]["rubric"]) or {}).get("customer")
    log = _tool_log(domain, messages, customer)
    return _with_db(row, lambda conn: customer_policy_problem(domain, conn, log)) if any(e["wrote"] for e in log) \
        else None


def needless_read(row: Mapping[str, Any]) -> str | None:
    """A read without a reason (``needless_reads``): it looks up what the user stated or a result returned."""
    parts = execution_parts(row)
    if parts is None:
        return None
    domain, messages, _ = parts
    calls, results, said = episode_steps(messages)
    found = needless_reads(domain, calls, results, said)
    return f"{calls[found[0]]['name']} looks up what is already known" if found else None


def _written_values(domain: CompiledDomain, tool: Any, content: Mapping[str, Any]) -> list[str]:
    """What a write set: the target's fields its effects set or adjust, and the records it created."""
    action = domain.spec.action(tool.action)
    row = content.get(action.target) or {}
    fields = [e.field for e in action.effects if e.kind in ("set", "adjust") and e.row == "target"]
    # a flag is told in words ("paperless yes") as well as JSON ("true")
    words = [("yes" if row[f] else "no") for f in fields if isinstance(row.get(f), bool)]
    values = [v for f in fields for v in _flat_strings(row.get(f))]
    return values + words + _flat_strings(content.get("created") or {})


def unstated_outcome(row: Mapping[str, Any]) -> str | None:
    """The final message states no value a write set (a field its effects changed, a record it created) in an
    environment row with a write, or for a procedure no value of the last step's result."""
    messages = json_field(row["messages"])
    final = str(messages[-1].get("content") or "") if messages else ""
    if row.get("verifier") == SCHEMA:
        last = next((m for m in reversed(messages) if m.get("role") == "tool"), None)
        values = _flat_strings(json.loads(str(last["content"]))) if last is not None else []
        values = [v for v in values if len(v) > 2]
        return None if not values or any(v in final for v in values) else "the final message states no result"
    parts = execution_parts(row)
    if parts is None:
        return None
    domain = parts[0]
    results = {m.get("tool_call_id"): (i, str(m.get("content") or "")) for i, m in enumerate(messages)
               if m.get("role") == "tool"}
    written: list[str] = []
    for m in messages:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            tool = domain.tools.get(call["function"]["name"])
            result = results.get(call.get("id"), (0, ""))[1]
            if tool is None or not tool.is_write or tool_failed({"content": result}):
                continue
            try:
                content = json.loads(result)
            except json.JSONDecodeError:
                continue
            written += _written_values(domain, tool, content)
    if written and not any(v in final for v in written):
        return "the final message states none of the values the writes returned"
    return None


# --- verifiers ------------------------------------------------------------------------------------------------


class _RecordedUser:
    """Replays the user's recorded messages (a teacher may have written them); ends only after the final write."""

    def __init__(self, first: str, replies: list[str]) -> None:
        self.first, self.replies = first, list(replies)

    def first_message(self) -> str:
        return self.first

    def reply(self, assistant_text: str, final_write_done: bool) -> tuple[str, bool]:
        if self.replies:
            return self.replies.pop(0), False
        return "Thank you, that is all I needed.", final_write_done


def _summary_holds(summary: str, actual: str) -> bool:
    """A summarized result may only keep values the tool really returned."""
    try:
        kept = json.loads(summary.removeprefix(SUMMARY_TAG))
    except json.JSONDecodeError:
        return False
    return all(v in actual for v in _flat_strings(kept))


def _flat_strings(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _flat_strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _flat_strings(v)]
    return [] if obj is None else [json.dumps(obj) if not isinstance(obj, str) else obj]


def verify_execution(messages: Sequence[Message], verify_input: Mapping[str, Any], env_db: bytes) -> str | None:
    """Replay the conversation in the environment (see the module docstring); None when it verifies."""
    if len(messages) < 3 or messages[0].get("role") != "system" or messages[1].get("role") != "user":
        return "an episode starts with the system prompt and the user's request"
    env = {**verify_input["env"], "db": env_db}
    task = dict(verify_input["task"])
    replies = [str(m["content"]) for m in messages[2:] if m["role"] == "user"]
    environment = Environment(env)
    try:
        environment.reset(task, _RecordedUser(str(messages[1]["content"]), replies))
        i, reward, done = 2, 0.0, False
        while i < len(messages):
            m = messages[i]
            if m["role"] != "assistant":
                return f"message {i}: a {m['role']} message where the agent speaks"
            obs, reward, done, _ = environment.step(m)
            # A call the environment refused changes nothing and is masked; every other call's arguments must come
            # from the conversation, or the trajectory teaches guessing.
            for call, result in zip(m.get("tool_calls") or [], obs.messages, strict=False):
                if not tool_failed(result) and (missing := underivable(messages, i, call_arguments(call))):
                    return (f"message {i}: {call['function']['name']} argument(s) {', '.join(missing[:3])} appear "
                            "in no earlier message")
            for j, got in enumerate(obs.messages, start=i + 1):
                if j >= len(messages) or messages[j]["role"] != got["role"]:
                    return f"message {j}: the replay answers with a {got['role']} message"
                recorded = str(messages[j].get("content") or "")
                if recorded != got["content"] and not (
                        recorded.startswith(SUMMARY_TAG) and _summary_holds(recorded, got["content"])):
                    return f"message {j}: the recorded {got['role']} message differs from the replay"
            i += 1 + len(obs.messages)
            if done and i < len(messages):
                return f"the episode ended at message {i - 1}, before the conversation did"
        if not done:
            return "the user never ended the conversation (the task was not completed)"
        if reward != 1.0:
            return f"the replay scores {reward} (rubric not met)"
        return None
    finally:
        environment.close()


def verify_schema(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> str | None:
    """Schema conformance (see the module docstring); None when it verifies."""
    if not tools:
        return "no tool schemas"
    for tool in tools:
        if (problem := schema_problem(tool)) is not None:
            return problem
    calls = 0
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or []:
            calls += 1
            if (problem := call_problem(call, tools)) is not None:
                return f"message {i}: {problem}"
            missing = underivable(messages, i, call_arguments(call))
            if missing:
                return f"message {i}: argument(s) {', '.join(missing[:3])} appear in no earlier message"
    return None if calls else "no tool call"


def verify_answer(messages: Sequence[Message], verify_input: Mapping[str, Any]) -> str | None:
    """Two-way answer and reasoning completeness (see the module docstring); None when it verifies."""
    final = messages[-1] if messages else {}
    if final.get("role") != "assistant":
        return "the conversation does not end with the answer"
    text = str(final.get("content") or "")
    golds = [str(verify_input["answer"]), *map(str, verify_input.get("aliases") or [])]
    if score_two_way(extract_boxed(text), golds) != 1.0:
        return "the boxed answer does not match the gold answer (two-way reward 0)"
    missing = [c for c in verify_input.get("conditions") or [] if c not in text]
    if missing:
        return f"the reasoning leaves out condition(s): {'; '.join(missing[:2])}"
    return None


def verify_row(row: Mapping[str, Any]) -> str | None:
    """Re-verify a trajectory row by its ``verifier``; None when it passes, else why not."""
    messages = json_field(row["messages"])
    vi = json_field(row.get("verify_input")) or {}
    verifier = row.get("verifier")
    if verifier == EXECUTION:
        if row.get("env_db") is None or "env" not in vi or "task" not in vi:
            return "an execution-verified row without its environment, task and database"
        return verify_execution(messages, vi, bytes(row["env_db"]))
    if verifier == SCHEMA:
        return verify_schema(messages, json_field(row["tools"]))
    if verifier == ANSWER:
        return verify_answer(messages, vi)
    if str(verifier).startswith(RESEARCH):  # a search's arguments are the model's own words: no grounding check
        return calls_invalid(messages, json_field(row["tools"]), row.get("train") or [True] * len(messages))
    return f"unknown verifier {verifier!r}; verifiers are {', '.join(VERIFIERS)}"


def calls_invalid(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]], train: Sequence[bool]) -> str | None:
    """A trained turn whose tool call is not valid JSON matching the offered schemas (masked turns may hold one:
    that is what the mask is for)."""
    for i, (m, trained) in enumerate(zip(messages, train, strict=False)):
        if trained:
            for call in m.get("tool_calls") or []:
                if (problem := call_problem(call, tools)) is not None:
                    return f"message {i}: {problem}"
    return None

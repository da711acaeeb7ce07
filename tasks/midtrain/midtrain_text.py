"""Stage `midtrain_text`: text-driven mid-training trajectories (LongCat-Flash-Thinking-2601 section 2, "Text-driven
synthesis"): procedural texts become tool schemas and call lists, then multi-turn trajectories, kept only when
every schema validates and every call's arguments conform to it (``verify_schema``).

``corpus: specs`` (the offline default) renders how-to texts from the shipped domain specs' tool docs and policies
(a chain sampled from each domain's graph per text); a local directory of .txt/.md files is parsed in the same
how-to format, and with a teacher engine any text the parser cannot read (a real tutorial) is extracted by the
teacher (``howto_from_json``). A text without a usable procedure goes to ``rejected`` with the reason.

The format of a how-to (``render_howto`` writes it, ``parse_howto`` reads it):

    # How to <goal>
    Tools:
    - `name(param: type, other?: type = a|b)`: what it does
    Steps:
    1. Call `name` with your param.
    2. Call `other_tool` with the `param` from step 1 and your other.
    Policies:
    - ...
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from data_contracts.stage import REJECTED, Artifact, StageError, rng_for, stage
from envgen.compiler import CompiledDomain, ToolParam, compiled_domains
from envgen.construct import sample_chain
from envgen.customers import POLICY as CUSTOMER_POLICY
from envgen.environment import render_result
from envgen.records import TRAJECTORY
from envgen.tools import render_value
from envgen.trajectory_checks import SCHEMA, verify_schema
from envgen.trajectory_standard import VARIED_SENTENCES, habit_problem
from tasks.midtrain.synth import identifying_tool
from tasks.midtrain.trajectory_stages import (
    TrajectoryParams,
    make_row,
    open_teacher,
    token_counter,
    too_long,
    trajectory_contract,
)
from tasks.midtrain.words import CHANGED, CREATED, fact_sentence, fill, shown
from tasks.readers import TEXT_SUFFIXES, text_files
from tasks.records import ITEM_REJECTED
from tasks.tokenizer import keyword_or_dir

JSON_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
_SIGNATURE = re.compile(r"^- `([A-Za-z_][A-Za-z0-9_]*)\(([^`]*)\)`: (.+)$")
_PARAM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\?)?: (string|integer|number|boolean)(?: = ([^,]+))?$")
_STEP = re.compile(r"^(\d+)\. Call `([A-Za-z_][A-Za-z0-9_]*)`(?: with (.+))?\.$")
_FROM_STEP = re.compile(r"^the `([A-Za-z_][A-Za-z0-9_]*)` from step (\d+)$")
_YOUR = re.compile(r"^your ([A-Za-z_][A-Za-z0-9_]*)$")


class HowToError(ValueError):
    """The text holds no usable procedure; the message says what is missing or malformed."""


@dataclass(frozen=True)
class Step:
    tool: str
    sources: dict[str, tuple[str, int]]  # param -> ("user", 0) | ("step", k) (1-based)


@dataclass(frozen=True)
class HowTo:
    goal: str
    tools: list[dict[str, Any]]  # OpenAI function schemas
    steps: list[Step]
    policies: list[str]


# --- rendering (the offline corpus) ------------------------------------------------------------------------


def _signature(p: ToolParam) -> str:
    kind = {"int": "integer", "float": "number", "money": "number", "bool": "boolean"}.get(p.field_type, "string")
    values = f" = {'|'.join(p.values)}" if p.values else ""
    return f"{p.name}{'' if p.required else '?'}: {kind}{values}"


def _supplier(domain: CompiledDomain, chain: list[str], k: int, sem: str | None) -> int | None:
    """The first earlier step (1-based) whose tool returns values of type ``sem``: a value is taken where it first
    appears, never passed along through steps that only hand it back."""
    return next((j for j in range(1, k) if sem in domain.tools[chain[j - 1]].outputs), None)


def steps_with_a_reason(domain: CompiledDomain, chain: list[str], keep_first: bool = False) -> list[str]:
    """The chain without read steps no later step takes anything from (the last step, the write, always stays;
    ``keep_first`` keeps the first too: identifying the customer is its reason)."""
    chain = list(chain)
    while True:
        used = {_supplier(domain, chain, k, p.sem) for k, name in enumerate(chain, start=1)
                for p in domain.tools[name].params if p.required}
        idle = [k for k in range(1, len(chain)) if k not in used and not (keep_first and k == 1)]
        if not idle:
            return chain
        chain.pop(idle[0] - 1)


READ_KINDS = ("get", "lookup", "find", "list_by", "parent_of")


def _user_param(domain: CompiledDomain, p: ToolParam, read: bool) -> bool:
    """Whether a person can give ``p``: a value (an email, a date, an amount, a choice), never a key, nor a field
    only staff know; a read's argument must single out the person's own record (an email, a code they hold), not
    search everyone's (a status)."""
    if p.sem is None:
        return not read
    if "." not in p.sem:
        return False  # a key: found with the tools
    entity, field = p.sem.split(".", 1)
    spec = domain.spec.entity(entity).field(field)
    return spec is not None and not spec.internal and (spec.unique or not read)


def found_with_tools(domain: CompiledDomain, chain: list[str]) -> list[str] | None:
    """``chain`` with a read inserted before each step whose key parameter no earlier step returns (the reservation
    id comes from listing the identified user's reservations, never from the user); None when some key cannot be
    found from what earlier steps return and what a person can give."""
    out: list[str] = []
    for name in chain:
        for p in domain.tools[name].params:
            if not p.required or p.sem is None or "." in p.sem or any(p.sem in domain.tools[t].outputs for t in out):
                continue
            supplied = {s for t in out for s in domain.tools[t].outputs}
            finder = next((t for t in sorted(domain.tools) if t not in out and t != name
                           and domain.tools[t].kind in READ_KINDS and p.sem in domain.tools[t].outputs
                           and all(q.sem in supplied or _user_param(domain, q, read=True)
                                   for q in domain.tools[t].params if q.required)), None)
            if finder is None:
                return None
            out.append(finder)
        out.append(name)
    if any(not _user_param(domain, p, not domain.tools[name].is_write) for k, name in enumerate(out, start=1)
           for p in domain.tools[name].params if p.required and _supplier(domain, out, k, p.sem) is None):
        return None
    return out


def render_howto(domain: CompiledDomain, chain: list[str], goal: str) -> str:
    """A how-to text for ``chain`` (reads then a write) from the domain's tool docs and policies: each required
    parameter is taken from the latest earlier step whose tool supplies it (a graph edge), else asked of the user."""
    lines = [f"# How to {goal}", "", "Tools:"]
    for name in dict.fromkeys(chain):
        tool = domain.tools[name]
        params = ", ".join(_signature(p) for p in tool.params if p.required or p.values)
        lines.append(f"- `{name}({params})`: {tool.description.splitlines()[0]}")
    lines += ["", "Steps:"]
    for k, name in enumerate(chain, start=1):
        parts = []
        for p in domain.tools[name].params:
            if not p.required:
                continue
            src = _supplier(domain, chain, k, p.sem)
            parts.append(f"the `{p.name}` from step {src}" if src else f"your {p.name}")
        lines.append(f"{k}. Call `{name}`" + (f" with {' and '.join(parts)}" if parts else "") + ".")
    policies = [p.text for p in domain.spec.policies] + ([CUSTOMER_POLICY] if domain.spec.customer_entity else [])
    if policies:
        lines += ["", "Policies:", *(f"- {t}" for t in policies)]
    return "\n".join(lines) + "\n"


# --- parsing -------------------------------------------------------------------------------------------------


def _param_schema(text: str, tool: str) -> tuple[str, dict[str, Any], bool]:
    m = _PARAM.match(text.strip())
    if m is None:
        raise HowToError(f"tool {tool}: cannot read parameter {text.strip()[:60]!r} (want name[?]: type[ = a|b])")
    name, optional, kind, values = m.groups()
    schema: dict[str, Any] = {"type": JSON_TYPES[kind]}
    if values:
        options = [v.strip() for v in values.split("|") if v.strip()]
        if kind != "string" or not options:
            raise HowToError(f"tool {tool}: allowed values are for string parameters ({name})")
        schema["enum"] = options
    return name, schema, not optional


def parse_howto(text: str) -> HowTo:
    """The procedure of a how-to text (format in the module docstring); HowToError names what is wrong."""
    goal, tools, steps, policies, section = None, {}, [], [], None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("# How to "):
            goal = line.removeprefix("# How to ").strip()
        elif line in ("Tools:", "Steps:", "Policies:"):
            section = line[:-1]
        elif section == "Tools" and line.startswith("- "):
            m = _SIGNATURE.match(line)
            if m is None:
                raise HowToError(f"cannot read tool line {line[:80]!r}")
            name, params, doc = m.groups()
            props, required = {}, []
            for part in (p for p in params.split(", ") if p.strip()):
                pname, schema, req = _param_schema(part, name)
                props[pname] = schema
                required += [pname] if req else []
            tools[name] = {"type": "function", "function": {"name": name, "description": doc.strip(), "parameters": {
                "type": "object", "properties": props, "required": required, "additionalProperties": False}}}
        elif section == "Steps" and line:
            steps.append(_parse_step(line, len(steps) + 1))
        elif section == "Policies" and line.startswith("- "):
            policies.append(line[2:])
    if not goal or not tools or not steps:
        raise HowToError("no procedure: a how-to needs a '# How to' title, a Tools list and numbered Steps")
    for step in steps:
        if step.tool not in tools:
            raise HowToError(f"step calls {step.tool}, which the Tools list does not declare")
    return HowTo(goal, list(tools.values()), steps, policies)


def _parse_step(line: str, number: int) -> Step:
    m = _STEP.match(line)
    if m is None or int(m.group(1)) != number:
        raise HowToError(f"cannot read step {number}: {line[:80]!r} (want '{number}. Call `tool` with ...')")
    sources: dict[str, tuple[str, int]] = {}
    for part in (m.group(3) or "").split(" and "):
        if not part.strip():
            continue
        if (f := _FROM_STEP.match(part.strip())) is not None:
            if not 1 <= int(f.group(2)) < number:
                raise HowToError(f"step {number} takes {f.group(1)} from step {f.group(2)}, which is not earlier")
            sources[f.group(1)] = ("step", int(f.group(2)))
        elif (y := _YOUR.match(part.strip())) is not None:
            sources[y.group(1)] = ("user", 0)
        else:
            raise HowToError(f"step {number}: cannot read argument {part.strip()[:60]!r}")
    return Step(m.group(2), sources)


def howto_from_json(text: str) -> HowTo:
    """A teacher's extraction ({"goal", "tools": [OpenAI schemas], "steps": [{"tool", "arguments": {param:
    "user" | step number}}], "policies"}) as a HowTo; HowToError when it is not that shape."""
    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start:end + 1])
        tools = [t if "function" in t else {"type": "function", "function": t} for t in data["tools"]]
        steps = [Step(s["tool"], {p: ("user", 0) if v == "user" else ("step", int(v))
                                  for p, v in (s.get("arguments") or {}).items()}) for s in data["steps"]]
        return HowTo(str(data["goal"]), tools, steps, [str(p) for p in data.get("policies") or []])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HowToError(f"the teacher's extraction is not a procedure: {type(exc).__name__}: {exc}") from None


EXTRACTION_PROMPT = (
    "Read the tutorial below. Define the tools its procedure uses and the ordered calls. Answer with JSON only: "
    '{"goal": "...", "tools": [{"name": ..., "description": ..., "parameters": <JSON Schema object>}], "steps": '
    '[{"tool": name, "arguments": {param: "user" or the number of the earlier step that returns it}}], '
    '"policies": [...]}\n\nTutorial:\n')


# --- trajectories ----------------------------------------------------------------------------------------


def _value(schema: dict[str, Any], name: str, rng: random.Random) -> Any:
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return rng.randint(1, 9)
    if kind == "number":
        return round(rng.uniform(1, 500), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if "email" in name:
        return f"{rng.choice(('alex', 'sam', 'kim', 'lee', 'noor'))}{rng.randrange(10, 1000)}@example.com"
    return f"{name[:3].upper()}{rng.randrange(10**5, 10**6)}"


_VERB = re.compile(r"^(get|lookup|find|list|search|read|fetch|show|check|count)_")


def noun(tool: str) -> str:
    """The record a tool's name is about: 'lookup_user_by_email' -> 'user', 'list_passengers_by_x' -> 'passenger'."""
    name = _VERB.sub("", tool).split("_by_")[0].split("_for_")[0]
    return name[:-1] if name.endswith("s") and not name.endswith("ss") else name


_KEY = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


class Records:
    """The simulated results of one procedure's calls, consistent along it: a record read before comes back the
    same, a write changes only what it sets (and says so), and a customer's records point at the customer a lookup
    identified. With a domain, records are its entities' rows with every field drawn as seeding draws it, and a
    write applies its action's set and adjust effects; without one (a text's own tools), a record is its id, the
    call's arguments, the fields later steps take and a status, and the last step completes it."""

    def __init__(self, domain: CompiledDomain | None, rng: random.Random) -> None:
        self.domain, self.rng = domain, rng
        self.rows: dict[tuple[str, Any], dict[str, Any]] = {}
        self.customer: str | None = None
        self.given: dict[str, Any] = {}  # what the user states: a record holding one of these holds the same value

    def call(self, howto: HowTo, k: int, args: dict[str, Any], wanted: set[str]) -> tuple[dict[str, Any], list[str]]:
        """(the result of step ``k`` called with ``args``, the fields it changed); the result holds ``wanted``."""
        if self.domain is None:
            return self._text_call(howto, k, args, wanted)
        tool = self.domain.tools[howto.steps[k].tool]
        entity = self.domain.spec.entity(tool.entity)
        given = {p: v for p, v in args.items() if p in entity.column_names}
        row = self._row(entity.name, {entity.key: args[entity.key]} if tool.is_write else given)
        row.update({p: self.given[p] for p in wanted if p in self.given and p in row})
        customer = self.domain.spec.customer_entity
        if customer is not None and entity.name == customer.name:
            self.customer = row[entity.key]
        if not tool.is_write:
            return ({"results": [row], "truncated": False} if tool.kind == "list_by" else row), []
        action = self.domain.spec.action(tool.action)
        changed = self._apply(action, row, args)
        result = {"ok": True, entity.name: row}
        if created := self._created(action, row, args):
            result["created"] = created
        return result, changed

    def user_value(self, howto: HowTo, k: int, param: str, schema: dict[str, Any]) -> Any:
        """A value the user gives for ``param`` of step ``k``: drawn as seeding draws its field (a phone number,
        a date), else from its schema."""
        from envgen.construct import seeded_faker
        from envgen.seeding import field_value

        tool = self.domain.tools.get(howto.steps[k].tool) if self.domain is not None else None
        sem = next((p.sem for p in tool.params if p.name == param), None) if tool is not None else None
        if sem is not None and "." in sem:
            entity, name = sem.split(".", 1)
            field = self.domain.spec.entity(entity).field(name)
            if field is not None:
                return field_value(field, self.domain.spec, seeded_faker(self.domain.spec.locale, self.rng), self.rng)
        return _value(schema, param, self.rng)

    def take(self, record: dict[str, Any], param: str) -> Any:
        """The value of ``param`` a later step takes from ``record``: its column of that name, else (a domain's
        row) the relation column pointing at the entity ``param`` keys (``branch_id`` from ``pickup_branch_id``)."""
        if param in record or self.domain is None:
            return record.get(param)
        for entity in self.domain.spec.entities:
            if entity.key == param:
                return next((record[r.field] for e in self.domain.spec.entities for r in e.relations
                             if r.to == entity.name and r.field in record), None)
        return None

    def _row(self, entity: str, given: dict[str, Any]) -> dict[str, Any]:
        """The row of ``entity`` matching ``given`` seen before, else a new one holding ``given``."""
        from envgen.construct import seeded_faker
        from envgen.seeding import field_value

        for (name, _), row in self.rows.items():
            if name == entity and given and all(row.get(p) == v for p, v in given.items()):
                return row
        spec = self.domain.spec
        ent = spec.entity(entity)
        customer = spec.customer_entity
        fake = seeded_faker(spec.locale, self.rng)
        row = {ent.key: ent.id_prefix + "".join(self.rng.choices(_KEY, k=6))}
        for r in ent.relations:
            mine = customer is not None and r.to == customer.name and self.customer is not None
            row[r.field] = self.customer if mine else spec.entity(r.to).id_prefix + "".join(self.rng.choices(_KEY, k=6))
        row |= {f.name: field_value(f, spec, fake, self.rng) for f in ent.fields} | given
        self.rows[(entity, row[ent.key])] = row
        return row

    def _apply(self, action: Any, row: dict[str, Any], args: dict[str, Any]) -> list[str]:
        from envgen.tools import fmt_time

        changed = []
        for effect in action.effects:
            if effect.kind == "create" or effect.row != "target" or effect.field not in row:
                continue
            to = effect.to
            value = to.value if to.value is not None else args.get(to.param) if to.param else None
            if to.now:
                kind = self.domain.spec.entity(action.target).field(effect.field)
                value = fmt_time(self.domain.spec.now, kind.type if kind is not None else "datetime")
            if value is None:
                continue
            if effect.kind == "adjust" and isinstance(row[effect.field], int | float):
                value = round(row[effect.field] + effect.scale * value, 2)
            row[effect.field] = value
            changed.append(effect.field)
        return list(dict.fromkeys(changed))

    def _created(self, action: Any, target: dict[str, Any], args: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The records a write's create effects add: their set values, the rest drawn as seeding draws them."""
        from envgen.tools import fmt_time

        out = {}
        for effect in action.effects:
            if effect.kind != "create":
                continue
            row = self._row(effect.entity, {})
            for column, to in effect.values.items():
                if to.param is not None:
                    row[column] = args.get(to.param)
                elif to.ref is not None and to.ref.startswith("target."):
                    row[column] = target.get(to.ref.split(".", 1)[1])
                elif to.now:
                    row[column] = fmt_time(self.domain.spec.now, "datetime")
                elif to.value is not None:
                    row[column] = to.value
            out[effect.entity] = row
        return out

    def _text_call(self, howto: HowTo, k: int, args: dict[str, Any],
                   wanted: set[str]) -> tuple[dict[str, Any], list[str]]:
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in howto.tools}
        last = k == len(howto.steps) - 1
        ids = [p for p in args if p.endswith("_id")]
        # the last step acts on the record its first id names (a reservation), a read returns its own noun's
        key = ids[0] if last and ids else f"{noun(howto.steps[k].tool)}_id"
        name = key.removesuffix("_id")
        match = {key: args[key]} if last and ids else args
        row = next((r for (n, _), r in self.rows.items() if n == name and all(r.get(p) == v for p, v in match.items())),
                   None)
        if row is None:
            row = {key: args.get(key, _value({"type": "string"}, key, self.rng)), **args,
                   "status": self.rng.choice(("active", "confirmed", "open", "pending"))}
            self.rows[(name, row[key])] = row
        later = {p: schemas[s.tool]["properties"][p] for s in howto.steps[k + 1:] for p in s.sources if p in wanted}
        row.update({p: self.given.get(p, _value(schema, p, self.rng)) for p, schema in later.items() if p not in row})
        if not last:
            return row, []
        row.update({p: v for p, v in args.items() if p != key})
        row["status"] = "completed"  # the procedure's last step does its goal
        return {"ok": True, name: row}, ["status"]


STEP = ("Step {n}: {tool}, with {args}.", "Now {tool}, with {args}.", "I call {tool} with {args}.",
        "Next, {tool} needs {args}.", "With {args} in hand, I call {tool}.", "The procedure continues: {tool} on {args}.",
        "For step {n} I pass {args} to {tool}.", "{tool} comes next; it takes {args}.")
BARE_STEP = ("Step {n}: {tool}.", "Now {tool}.", "I call {tool} now.")
WHENCE = {"user": ("from you", "as you gave it", "which you told me", "from your message"),
          "step": ("from step {k}", "that step {k} returned", "from the {tool} result", "returned by {tool}")}
DONE = ("Done: I have completed the steps to {goal}.", "I finished the procedure to {goal}.",
        "That completes the procedure to {goal}.", "The steps to {goal} went through.")


def _fields(result: dict[str, Any]) -> dict[str, Any]:
    """A result's record: the row, a list's one row, a write's ``{"ok": true, entity: row}`` row."""
    if isinstance(result.get("results"), list):
        return result["results"][0]
    inner = [v for v in result.values() if isinstance(v, dict)]
    return inner[0] if inner else result


def trajectory(howto: HowTo, rng: random.Random, domain: CompiledDomain | None = None) -> list[dict[str, Any]]:
    """The multi-turn conversation of a procedure: the user asks for the goal and gives the values only they
    know; the agent calls each step's tool, taking values from earlier results, and closes with what the last
    step changed. Each result is a record (``Records``: what the call returns, holding the fields later steps
    take), never an echo of the call's arguments."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in howto.tools}
    records = Records(domain, rng)
    user: dict[str, Any] = {}
    wanted: list[set[str]] = [set() for _ in howto.steps]  # what later steps take from each step's result
    for k, step in enumerate(howto.steps):
        props = schemas[step.tool].get("properties", {})
        for param, (kind, src) in step.sources.items():
            if param not in props:
                raise HowToError(f"step {k + 1}: {step.tool} has no parameter {param}")
            if kind == "user":
                user.setdefault(param, records.user_value(howto, k, param, props[param]))
            else:
                wanted[src - 1].add(param)
    records.given = user
    stated = " ".join(fact_sentence(p.replace("_", " "), render_value(v), rng) for p, v in user.items())
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You complete tasks with the tools you are given." +
         ("\nPolicies:\n" + "\n".join(f"- {p}" for p in howto.policies) if howto.policies else "")},
        {"role": "user", "content": f"Please help me {howto.goal}. {stated}".strip()},
    ]
    produced: list[dict[str, Any]] = []
    changed: list[str] = []
    for k, step in enumerate(howto.steps):
        args = {p: (user[p] if kind == "user" else records.take(_fields(produced[src - 1]), p))
                for p, (kind, src) in step.sources.items()}
        result, changed = records.call(howto, k, args, wanted[k])
        missing = sorted(p for p in wanted[k] if records.take(_fields(result), p) is None)
        if missing:
            raise HowToError(f"step {k + 1}: {step.tool} returns no {', '.join(missing)}, which a later step takes")
        produced.append(result)
        given = [f"the {p.replace('_', ' ')} {render_value(args[p])} ("
                 + fill(rng.choice(WHENCE[kind]), k=str(src), tool=howto.steps[src - 1].tool if src else "") + ")"
                 for p, (kind, src) in step.sources.items()]
        call = {"id": f"call_{k}", "type": "function", "function": {"name": step.tool, "arguments": json.dumps(args)}}
        listed = ", ".join(given[:-1]) + (f" and {given[-1]}" if len(given) > 1 else given[-1] if given else "")
        text = fill(rng.choice(STEP if given else BARE_STEP), n=str(k + 1), tool=step.tool, args=listed)
        messages.append({"role": "assistant", "content": text, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": render_result(result)})
    last = _fields(produced[-1])
    key = next(iter(last))
    done = fill(rng.choice(DONE), goal=howto.goal)
    if changed:
        fields = ", ".join(f"{f.replace('_', ' ')} {shown(last[f])}" for f in changed)
        done += " " + fill(rng.choice(CHANGED), entity=key.removesuffix("_id").replace("_", " "),
                           key=render_value(last[key]), fields=fields)
    for entity, record in (produced[-1].get("created") or {}).items():
        new_key = next(iter(record))
        fields = ", ".join(f"{f.replace('_', ' ')} {shown(v)}" for f, v in record.items()
                           if f != new_key and not f.endswith("_id") and v is not None)
        done += " " + fill(rng.choice(CREATED), entity=entity.replace("_", " "), key=render_value(record[new_key]),
                           fields=fields)
    messages.append({"role": "assistant", "content": done})
    return messages


STAGE = "midtrain_text"


class MidtrainTextParams(TrajectoryParams):
    corpus: str = Field("specs", description="'specs' (how-to texts rendered from the domain specs) or a local "
                        "directory of .txt/.md procedural texts")
    texts_per_domain: int = Field(4, ge=0, description="how-to texts rendered per domain (corpus: specs)")
    max_reads: int = Field(3, ge=1, le=8, description="most read steps before the write of a rendered procedure")
    chain_attempts: int = Field(8, ge=1, le=64, description="chains sampled per rendered text until one starts from "
                                "what a person knows (every key found with the tools)")

    @field_validator("corpus")
    @classmethod
    def _corpus(cls, value: str) -> str:
        return keyword_or_dir("corpus", value, "specs", "how-to texts rendered from the domain specs")

    def local_inputs(self) -> list[str]:
        return super().local_inputs() + ([] if self.corpus == "specs" else [self.corpus])


def spec_texts(inputs: Mapping[str, Artifact], params: MidtrainTextParams,
               partition: str) -> list[tuple[str, str, str, CompiledDomain]]:
    """(id, domain, text, compiled domain) of the rendered how-to corpus: per text, chains sampled until one
    starts from what a person knows (``found_with_tools``), up to ``chain_attempts``."""
    domains = compiled_domains(inputs["domain_graphs"].read("domains"))
    out = []
    for name in sorted(set(domains) - set(params.heldout)):
        domain = domains[name]
        identify = identifying_tool(domain, set(domain.tools))
        for i in range(params.texts_per_domain):
            rng = rng_for(params.seed, STAGE, f"{partition}/{name}", i)
            for _ in range(params.chain_attempts):
                chain = sample_chain(domain, rng, set(domain.tools), params.max_reads)
                if chain and identify is not None and identify.name not in chain:
                    chain = [identify.name, *chain]  # the customer is identified before anything changes
                chain = found_with_tools(domain, chain) if chain else None
                if chain:
                    chain = steps_with_a_reason(domain, chain, keep_first=identify is not None)
                    goal = domain.tools[chain[-1]].description.split(". ")[0].rstrip(".").lower()
                    out.append((f"{STAGE}:{name}:{i:05d}", name, render_howto(domain, chain, goal), domain))
                    break
    return out


# 2: the customer identified first; simulated results keep the values calls were given; the outcome stated
# 3: results are records (never an echo); every key found with the tools; the trajectory standard; varied words
# 4: a write creates its records and the final reports them; flags in words
@stage(name=STAGE, version="4", params=MidtrainTextParams, inputs=("domain_graphs", "tokenizer"),
       outputs={"trajectories": trajectory_contract([STAGE], checks=(VARIED_SENTENCES,)), REJECTED: ITEM_REJECTED.contract()})
def midtrain_text(inputs: Mapping[str, Artifact], params: MidtrainTextParams, partition: str) -> dict[str, pl.DataFrame]:
    """Procedural texts -> tool schemas and call lists -> schema-conformant multi-turn trajectories."""
    if params.corpus == "specs":
        texts = spec_texts(inputs, params, partition)
    else:
        files = text_files(params.corpus)
        if not files:
            raise StageError(f"midtrain_text: corpus directory {params.corpus} holds no "
                             f"{'/'.join(TEXT_SUFFIXES)} files")
        texts = [(f"{STAGE}:{path.stem}", "text", path.read_text(encoding="utf-8", errors="replace"), None)
                 for path in files]
    count, teacher = token_counter(params, inputs), open_teacher(params)
    rows, rejected = [], []
    try:
        for i, (item_id, domain, text, compiled) in enumerate(texts):
            try:
                try:
                    howto = parse_howto(text)
                except HowToError:
                    if teacher.engine is None:
                        raise
                    howto = howto_from_json(teacher.ask(EXTRACTION_PROMPT + text[:12000]))
                messages = trajectory(howto, rng_for(params.seed, STAGE, partition, i), compiled)
            except HowToError as exc:
                rejected.append({"id": item_id, "reason": f"no_procedure: {exc}"})
                continue
            except Exception as exc:  # noqa: BLE001 - a teacher failure rejects this text only
                rejected.append({"id": item_id, "reason": f"teacher: {type(exc).__name__}: {str(exc)[:200]}"})
                continue
            tokens = count(messages, howto.tools)
            failed = verify_schema(messages, howto.tools)
            reason = f"not_verified: {failed}" if failed else too_long(tokens, params)
            if reason:
                rejected.append({"id": item_id, "reason": reason})
                continue
            row = make_row(id=item_id, source=STAGE, messages=messages, tools=howto.tools, verifier=SCHEMA,
                           verify_input={"limits": params.limits(), "teacher": teacher.name, "goal": howto.goal},
                           tokens=tokens, domain=domain, seed_id=item_id)
            # a procedure that has the user state an internal key (a text's "your order_id") is set aside
            if (problem := habit_problem(row)) is not None:
                rejected.append({"id": item_id, "reason": problem})
                continue
            rows.append(row)
    finally:
        teacher.close()
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected)}

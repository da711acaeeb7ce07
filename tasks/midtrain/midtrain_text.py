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

from data_contracts.readers import TEXT_SUFFIXES, text_files
from data_contracts.schemas import ITEM_REJECTED, TRAJECTORY
from data_contracts.stage import REJECTED, Artifact, StageError, rng_for, stage
from envgen.compiler import CompiledDomain, ToolParam, compiled_domains
from envgen.construct import sample_chain
from envgen.customers import POLICY as CUSTOMER_POLICY
from envgen.runtime import render_result
from envgen.trajectory_checks import SCHEMA, verify_schema
from tasks.midtrain.routes import (
    TrajectoryParams,
    make_row,
    open_teacher,
    token_counter,
    too_long,
    trajectory_contract,
)
from tasks.midtrain.synth import identifying_tool
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


def trajectory(howto: HowTo, rng: random.Random) -> list[dict[str, Any]]:
    """The multi-turn conversation of a procedure: the user asks for the goal and gives the values only they
    know; the agent calls each step's tool, taking values from earlier (simulated) results, and closes with what
    the last step did. A simulated result keeps what its call was given (a record looked up by the id the user
    stated comes back with that id), so no value changes along the way."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in howto.tools}
    user: dict[str, Any] = {}
    wanted: list[set[str]] = [set() for _ in howto.steps]  # what later steps take from each step's result
    for k, step in enumerate(howto.steps):
        props = schemas[step.tool].get("properties", {})
        for param, (kind, src) in step.sources.items():
            if param not in props:
                raise HowToError(f"step {k + 1}: {step.tool} has no parameter {param}")
            if kind == "user":
                user.setdefault(param, _value(props[param], param, rng))
            else:
                wanted[src - 1].add(param)
    produced: list[dict[str, Any]] = [{} for _ in howto.steps]
    calls: list[dict[str, Any]] = []
    for k, step in enumerate(howto.steps):
        props = schemas[step.tool].get("properties", {})
        args = {p: (user[p] if kind == "user" else produced[src - 1][p]) for p, (kind, src) in step.sources.items()}
        for param in sorted(wanted[k]):
            later = next(schemas[s.tool]["properties"][param] for s in howto.steps[k + 1:] if param in s.sources)
            produced[k][param] = args.get(param, user.get(param, _value(props.get(param, later), param, rng)))
        calls.append(args)
    stated = " ".join(f"My {p.replace('_', ' ')} is {v}." for p, v in user.items())
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You complete tasks with the tools you are given." +
         ("\nPolicies:\n" + "\n".join(f"- {p}" for p in howto.policies) if howto.policies else "")},
        {"role": "user", "content": f"Please help me {howto.goal}. {stated}".strip()},
    ]
    for k, (step, args) in enumerate(zip(howto.steps, calls, strict=True)):
        whence = "; ".join(f"{p} from {'you' if kind == 'user' else f'step {src}'}"
                           for p, (kind, src) in step.sources.items()) or "no arguments"
        call = {"id": f"call_{k}", "type": "function", "function": {"name": step.tool, "arguments": json.dumps(args)}}
        messages.append({"role": "assistant", "content": f"Step {k + 1}: {step.tool} ({whence}).",
                         "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"],
                         "content": render_result({"ok": True, **args, **produced[k]})})
    last = ", ".join(f"{p.replace('_', ' ')} {v}" for p, v in calls[-1].items())
    messages.append({"role": "assistant", "content": f"Done: I have completed the steps to {howto.goal}; "
                     f"{howto.steps[-1].tool} succeeded" + (f" for {last}." if last else ".")})
    return messages


STAGE = "midtrain_text"


class MidtrainTextParams(TrajectoryParams):
    corpus: str = Field("specs", description="'specs' (how-to texts rendered from the domain specs) or a local "
                        "directory of .txt/.md procedural texts")
    texts_per_domain: int = Field(4, ge=0, description="how-to texts rendered per domain (corpus: specs)")
    max_reads: int = Field(3, ge=1, le=8, description="most read steps before the write of a rendered procedure")

    @field_validator("corpus")
    @classmethod
    def _corpus(cls, value: str) -> str:
        return keyword_or_dir("corpus", value, "specs", "how-to texts rendered from the domain specs")

    def local_inputs(self) -> list[str]:
        return super().local_inputs() + ([] if self.corpus == "specs" else [self.corpus])


def spec_texts(inputs: Mapping[str, Artifact], params: MidtrainTextParams, partition: str) -> list[tuple[str, str, str]]:
    """(id, domain, text) of the rendered how-to corpus."""
    domains = compiled_domains(inputs["domain_graphs"].read("domains"))
    out = []
    for name in sorted(set(domains) - set(params.heldout)):
        domain = domains[name]
        for i in range(params.texts_per_domain):
            rng = rng_for(params.seed, STAGE, f"{partition}/{name}", i)
            chain = sample_chain(domain, rng, set(domain.tools), params.max_reads)
            identify = identifying_tool(domain, set(domain.tools))
            if chain and identify is not None and identify.name not in chain:
                chain = [identify.name, *chain]  # the customer is identified before anything changes
            if chain:
                chain = steps_with_a_reason(domain, chain, keep_first=identify is not None)
                goal = domain.tools[chain[-1]].description.split(". ")[0].rstrip(".").lower()
                out.append((f"{STAGE}:{name}:{i:05d}", name, render_howto(domain, chain, goal)))
    return out


# 2: the customer identified first; simulated results keep the values calls were given; the outcome stated
@stage(name=STAGE, version="2", params=MidtrainTextParams, inputs=("domain_graphs", "tokenizer"),
       outputs={"trajectories": trajectory_contract([STAGE]), REJECTED: ITEM_REJECTED.contract()})
def midtrain_text(inputs: Mapping[str, Artifact], params: MidtrainTextParams, partition: str) -> dict[str, pl.DataFrame]:
    """Procedural texts -> tool schemas and call lists -> schema-conformant multi-turn trajectories."""
    if params.corpus == "specs":
        texts = spec_texts(inputs, params, partition)
    else:
        files = text_files(params.corpus)
        if not files:
            raise StageError(f"midtrain_text: corpus directory {params.corpus} holds no "
                             f"{'/'.join(TEXT_SUFFIXES)} files")
        texts = [(f"{STAGE}:{path.stem}", "text", path.read_text(encoding="utf-8", errors="replace")) for path in files]
    count, teacher = token_counter(params, inputs), open_teacher(params)
    rows, rejected = [], []
    try:
        for i, (item_id, domain, text) in enumerate(texts):
            try:
                try:
                    howto = parse_howto(text)
                except HowToError:
                    if teacher.engine is None:
                        raise
                    howto = howto_from_json(teacher.ask(EXTRACTION_PROMPT + text[:12000]))
                messages = trajectory(howto, rng_for(params.seed, STAGE, partition, i))
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
            rows.append(make_row(id=item_id, source=STAGE, messages=messages, tools=howto.tools, verifier=SCHEMA,
                                 verify_input={"limits": params.limits(), "teacher": teacher.name,
                                               "goal": howto.goal}, tokens=tokens, domain=domain, seed_id=item_id))
    finally:
        teacher.close()
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected)}

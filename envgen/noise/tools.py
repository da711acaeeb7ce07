"""Tool noise: a seeded fault schedule applied around the environment's tool execution.

LongCat-Flash-Thinking-2601, section 3.3.3: tool noise simulates "execution failures, inconsistent responses, and
partial results from external tools" (API timeouts, malformed responses, missing fields, stochastic failures).
Every fault here is recoverable by construction, and the schedule is a list of
:class:`~envgen.noise.records.Transform` stored in the task's ``noise`` record, so the verifier knows exactly
what was injected.

A kind of fault is one class below, declared with :func:`tool_fault` in curriculum order (mildest first): how it is
drawn on a golden step whose clean output fits it, what it does to a call (an error instead of the call, a changed
response, a response in parts, a simulated latency) and the recovery that undoes it, one the robust reference agent
performs. Faults are keyed by tool and arguments (continuation arguments excluded) and count attempts per key, so a
retry, a re-query and a page request all see a consistent, deterministic response whatever else the agent calls in
between. Latency is simulated: recorded in the events, never slept.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, ClassVar

from data_contracts.content import canonical_json
from envgen.noise.instruction import leaves
from envgen.noise.records import DECLARED, Recovery, Transform, declare

PAGE_TOKEN = "page_token"
CONTINUATION_TOKEN = "continuation_token"
CONTINUATION_ARGS = (PAGE_TOKEN, CONTINUATION_TOKEN)

DATE_FORMATS = {"us": "%m/%d/%Y", "long": "%d %B %Y", "compact": "%Y%m%d"}
ALIAS_STYLES = ("camel", "pascal", "upper", "kebab")


@dataclass
class ToolResponse:
    """What one tool call returns through the noise layer."""

    content: Any
    events: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: int = 0
    infra_error: str | None = None  # a real failure of the tool implementation: never the agent's fault


def _split_path(path: str) -> list[str | int]:
    return [int(p) if p.isdigit() else p for p in path.split(".")] if path else []


def _container(value: Any, path: str) -> tuple[Any, str | int] | None:
    """The object holding ``path``'s last key, and that key."""
    parts = _split_path(path)
    node = value
    for part in parts[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return (node, parts[-1]) if parts else None


def alias(name: str, style: str) -> str:
    """Another spelling of a field name that normalizes back to it (see :func:`normalize_key`)."""
    words = name.split("_")
    if style == "camel":
        return words[0] + "".join(w.title() for w in words[1:])
    if style == "pascal":
        return "".join(w.title() for w in words)
    if style == "upper":
        return name.upper()
    return "-".join(words)


def normalize_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def drift(value: Any, style: str) -> Any:
    """``value`` in another format: an ISO date in US/long/compact form, an amount as a currency string, a word in
    another casing. Returns ``value`` unchanged when the style does not apply."""
    if isinstance(value, str):
        for parse in (date.fromisoformat, datetime.fromisoformat):
            try:
                parsed = parse(value)
            except ValueError:
                continue
            if parsed.year < 1000:  # strftime does not zero-pad such years: the date would not parse back
                return value
            if style in DATE_FORMATS and len(value) == 10:
                return parsed.strftime(DATE_FORMATS[style])
            if style in DATE_FORMATS:
                return parsed.strftime(DATE_FORMATS[style] + " %H:%M:%S")
            return value
        # Casing drifts only identifier-like lowercase words (enum values): a name's casing cannot be restored.
        if style in ("upper", "title") and re.fullmatch(r"[a-z][a-z_]*", value):
            return value.upper() if style == "upper" else value.title()
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and style == "currency":
        return f"${value:,.2f}"
    return value


def drift_styles(value: Any) -> list[str]:
    """The styles that change ``value``."""
    return [s for s in (*DATE_FORMATS, "currency", "upper", "title") if drift(value, s) != value]


@dataclass
class Call:
    """One call going through the noise layer: its key (tool and arguments), which attempt of that key it is, the
    events it records and the session it belongs to."""

    key: str
    attempt: int
    events: list[dict[str, Any]]
    noise: ToolNoise


@dataclass
class ToolNoise:
    """Applies the tool faults of one task around a tool executor; one instance per episode.

    ``execute(name, arguments)`` runs the real tool and returns its JSON-decodable result (or raises for an
    infrastructure failure). Continuation arguments are stripped before it runs.
    """

    faults: Sequence[Transform]
    attempts: dict[str, int] = field(default_factory=dict)
    _pending: dict[str, list[Any]] = field(default_factory=dict)
    _tokens: dict[str, tuple[Transform, str, int]] = field(default_factory=dict)

    def tool_schemas(self, schemas: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The tool schemas the agent sees: tools that may answer in parts accept the continuation argument."""
        extra = {f.tool: f.changed["token_arg"] for f in self.faults if "token_arg" in f.changed}
        if not extra:
            return list(schemas)
        out = []
        for schema in schemas:
            schema = copy.deepcopy(dict(schema))
            fn = schema.get("function", schema)
            if fn.get("name") in extra:
                props = fn.setdefault("parameters", {"type": "object", "properties": {}}).setdefault("properties", {})
                props[extra[fn["name"]]] = {
                    "type": "string",
                    "description": "Continuation token from a previous partial response; omit for the first part.",
                }
            out.append(schema)
        return out

    def call(self, name: str, arguments: Mapping[str, Any], execute: Callable[[str, dict], Any]) -> ToolResponse:
        arguments = dict(arguments)
        token = next((arguments.pop(a) for a in CONTINUATION_ARGS if a in arguments), None)
        events: list[dict[str, Any]] = []
        if token is not None:
            return self._continue(name, str(token), events)
        key = f"{name}:{canonical_json(arguments)}"
        attempt = self.attempts.get(key, 0)
        self.attempts[key] = attempt + 1
        faults = [f for f in self.faults if f.matches(name, arguments)]
        latency = sum(TOOL_FAULTS[f.kind].latency_ms(f) for f in faults)
        if latency:
            events.append({"kind": "latency", "tool": name, "latency_ms": latency})
        for fault in faults:
            if (error := TOOL_FAULTS[fault.kind].refusal(fault, attempt)) is not None:
                events.append({"kind": fault.kind, "tool": name, "attempt": attempt})
                return ToolResponse({"error": error}, events, latency)
        try:
            result = execute(name, arguments)
        except Exception as exc:  # noqa: BLE001 - any failure of the real tool is infrastructure, labelled so
            return ToolResponse(
                {"error": {"type": "infrastructure", "message": f"{type(exc).__name__}: {exc}", "retryable": True}},
                [*events, {"kind": "infrastructure", "tool": name, "error": repr(exc)}], latency, repr(exc),
            )
        call = Call(key, attempt, events, self)
        for fault in faults:
            result = TOOL_FAULTS[fault.kind].respond(fault, result, call)
        return ToolResponse(result, events, latency)

    def in_parts(self, fault: Transform, key: str, parts: list[Any]) -> dict[str, Any]:
        """Keep the parts of a partial response and answer with the first."""
        self._pending[f"{key}#{fault.kind}"] = parts
        return self._part(fault, key, 0)

    def _part(self, fault: Transform, key: str, index: int) -> dict[str, Any]:
        parts = self._pending[f"{key}#{fault.kind}"]
        token = None
        if index + 1 < len(parts):
            token = hashlib.blake2b(f"{key}#{fault.kind}#{index + 1}".encode(), digest_size=6).hexdigest()
            self._tokens[token] = (fault, key, index + 1)
        return TOOL_FAULTS[fault.kind].part(fault, parts[index], token)

    def _continue(self, name: str, token: str, events: list[dict[str, Any]]) -> ToolResponse:
        fault, key, index = self._tokens.get(token, (None, "", 0))
        if fault is None or fault.tool != name:
            return ToolResponse({"error": {"type": "invalid_argument", "retryable": False,
                                           "message": f"unknown continuation token {token!r} for {name}"}}, events)
        events.append({"kind": fault.kind, "tool": name, "part": index})
        return ToolResponse(self._part(fault, key, index), events)


# ----------------------------------------------------------------------------------------------------------------
# the kinds of fault


@dataclass(frozen=True)
class Site:
    """A golden step a fault may be drawn on: its call, its clean output, the values of that output a later golden
    step needs, and the task's intensity and write tools."""

    action: Mapping[str, Any]
    output: Any
    needed: set[Any]
    max_failures: int
    writes: frozenset[str]

    @classmethod
    def of(cls, step: int, golden: Sequence[Mapping[str, Any]], outputs: Sequence[Any], max_failures: int,
           writes: frozenset[str]) -> Site:
        out = outputs[step]
        later = golden[step + 1:]
        needed = {v for _, v in leaves(out) if any(v in a.get("arguments", {}).values() for a in later)}
        return cls(golden[step], out, needed, max_failures, writes)


class ToolFault:
    """A kind of tool noise. Subclasses name their ``kind`` and ``recovery``, say how a fault is drawn on a golden
    step (``draw``) and what it does to a call: an error in place of the call (``refusal``), a changed response
    (``respond``), a simulated latency (``latency_ms``)."""

    kind: ClassVar[str]
    recovery: ClassVar[Recovery]
    withholds: ClassVar[bool] = False
    """Whether the fault withholds the step's response from a first call: two such faults never share a step."""

    def draw(self, site: Site, rng: random.Random) -> Transform | None:
        """The fault on this golden step, or None when its clean output does not fit it."""
        raise NotImplementedError

    def transform(self, site: Site, changed: dict[str, Any], hint: str, bites: bool = True, *,
                  every_call: bool = False) -> Transform:
        """The record of this fault on ``site``'s call (on every call of its tool with ``every_call``)."""
        return Transform(family="tool", kind=self.kind, tool=site.action["name"],
                         arguments=None if every_call else dict(site.action.get("arguments", {})),
                         changed=changed, recovery=self.recovery, hint=hint, bites=bites)

    def latency_ms(self, fault: Transform) -> int:
        return 0

    def refusal(self, fault: Transform, attempt: int) -> dict[str, Any] | None:
        """The error answered instead of running the call's ``attempt`` (0 for the first), or None to run it."""
        return None

    def respond(self, fault: Transform, result: Any, call: Call) -> Any:
        """The response after the real tool ran."""
        return result

    def part(self, fault: Transform, part: Any, token: str | None) -> dict[str, Any]:
        """One part of a partial response, with the token of the next part (None for the last)."""
        raise NotImplementedError


TOOL_FAULTS: Mapping[str, ToolFault] = DECLARED["tool"]
"""Every kind of tool fault, in curriculum order (mildest first): a level unlocks a prefix."""


def tool_fault(cls: type[ToolFault]) -> type[ToolFault]:
    """Declare a kind of tool fault (a duplicate kind raises); declaration order is curriculum order."""
    declare("tool", cls.kind, cls())
    return cls


@tool_fault
class Latency(ToolFault):
    """The normal result, slowly: a simulated latency is recorded. Nothing to recover."""

    kind = "latency"
    recovery = "none"

    def draw(self, site: Site, rng: random.Random) -> Transform | None:
        return self.transform(site, {"latency_ms": rng.choice([800, 2500, 6000, 15000])},
                              "The response is slow but complete; wait for it.", bites=False)

    def latency_ms(self, fault: Transform) -> int:
        return int(fault.changed["latency_ms"])


@tool_fault
class TransientFailure(ToolFault):
    """``{"error": {"type": "timeout"|"server_error", ...}}`` for the first ``failures`` attempts, without running
    the call. Recovered by retrying the same call."""

    kind = "transient_failure"
    recovery = "retry"
    withholds = True

    def draw(self, site: Site, rng: random.Random) -> Transform | None:
        failures = rng.randint(1, site.max_failures)
        error = rng.choice(["timeout", "server_error"])
        # At higher intensity the whole tool is flaky: every call, whatever its arguments, fails its first
        # attempts, so a policy cannot dodge the fault by reaching the data another way.
        flaky = site.max_failures > 1 and rng.random() < 0.5
        where = f"every call of {site.action['name']}" if flaky else "this call"
        return self.transform(site, {"failures": failures, "error": error, "tool_wide": flaky},
                              f"The first {failures} attempt(s) of {where} fail with a retryable {error}; call again.",
                              bites=site.action["name"] in site.writes or bool(site.needed), every_call=flaky)

    def refusal(self, fault: Transform, attempt: int) -> dict[str, Any] | None:
        if attempt >= int(fault.changed["failures"]):
            return None
        error = fault.changed["error"]
        message = "upstream timed out" if error == "timeout" else "internal server error (503)"
        return {"type": error, "message": f"{message}; the request was not applied", "retryable": True}


class FieldFault(ToolFault):
    """A fault on one field of the response, at the path it was drawn on: ``edit`` changes the field in place
    (raising when the response lacks it: an error, another row)."""

    first_attempt_only: ClassVar[bool] = False

    def fields(self, site: Site) -> list[tuple[str, Any]]:
        """The (path, value) of every field of the clean output this fault may change."""
        return [(p, v) for p, v in leaves(site.output) if p and not isinstance(v, bool) and v is not None]

    def draw(self, site: Site, rng: random.Random) -> Transform | None:
        fields = self.fields(site)
        if not fields:
            return None
        biting = [pv for pv in fields if pv[1] in site.needed]
        path, value = rng.choice(biting or fields)
        return self.on_field(site, rng, path, value, bool(biting))

    def on_field(self, site: Site, rng: random.Random, path: str, value: Any, bites: bool) -> Transform:
        raise NotImplementedError

    def edit(self, node: Any, key: Any, changed: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def respond(self, fault: Transform, result: Any, call: Call) -> Any:
        if self.first_attempt_only and call.attempt > 0:
            return result
        result = copy.deepcopy(result)
        where = _container(result, fault.changed["path"])
        if where is None:
            return result
        try:
            self.edit(where[0], where[1], fault.changed)
        except (KeyError, IndexError, TypeError):  # the response lacks the field (an error, another row)
            return result
        call.events.append({"kind": fault.kind, "tool": fault.tool, "path": fault.changed["path"]})
        return result


@tool_fault
class MissingField(FieldFault):
    """The first response lacks a field. Recovered by calling again (never drawn on a write: a repeated write
    would apply twice)."""

    kind = "missing_field"
    recovery = "requery"
    withholds = True
    first_attempt_only = True

    def fields(self, site: Site) -> list[tuple[str, Any]]:
        return [] if site.action["name"] in site.writes else super().fields(site)

    def on_field(self, site: Site, rng: random.Random, path: str, value: Any, bites: bool) -> Transform:
        return self.transform(site, {"path": path},
                              f"The first response omits '{path}'; call again for the complete record.", bites)

    def edit(self, node: Any, key: Any, changed: Mapping[str, Any]) -> None:
        node.pop(key)


class PartialResponse(ToolFault):
    """A response in parts, each but the last with a token the agent passes back (``token_arg``) for the next.
    Recovered by following the tokens until none is returned."""

    recovery = "follow_continuation"
    withholds = True
    token_arg: ClassVar[str]

    def split(self, result: Any, size: int) -> list[Any] | None:
        """The parts of ``result`` (``size`` is the fault's part size), None when it cannot be split."""
        raise NotImplementedError

    def part_size(self, site: Site, rng: random.Random) -> int | None:
        """The size of a part of ``site``'s clean output, None when the output cannot be split."""
        raise NotImplementedError

    def draw(self, site: Site, rng: random.Random) -> Transform | None:
        size = self.part_size(site, rng)
        if size is None:
            return None
        first = {v for _, v in leaves((self.split(site.output, size) or [site.output])[0])}
        return self.transform(site, {"part_size": size, "token_arg": self.token_arg},
                              f"The response comes in parts; call again with {self.token_arg} until no token is "
                              "returned.", bites=not site.needed <= first)

    def respond(self, fault: Transform, result: Any, call: Call) -> Any:
        parts = self.split(result, int(fault.changed["part_size"]))
        if parts is None:
            return result
        call.events.append({"kind": fault.kind, "tool": fault.tool, "parts": len(parts)})
        return call.noise.in_parts(fault, call.key, parts)


@tool_fault
class Pagination(PartialResponse):
    """A first page of a list with ``next_page_token``; the agent passes ``page_token`` for the next page."""

    kind = "pagination"
    token_arg = PAGE_TOKEN

    def part_size(self, site: Site, rng: random.Random) -> int | None:
        key = _list_key(site.output)
        return None if key is None else rng.randint(1, len(site.output[key]) - 1)

    def split(self, result: Any, size: int) -> list[Any] | None:
        """Pages of the response's list, the rest of the record repeated on each page."""
        key = _list_key(result)
        if key is None or len(result[key]) <= size:
            return None
        items = result[key]
        return [{**result, key: items[i : i + size]} for i in range(0, len(items), size)]

    def part(self, fault: Transform, part: Any, token: str | None) -> dict[str, Any]:
        body = dict(part)
        if token is not None:
            body |= {f"next_{fault.changed['token_arg']}": token, "truncated": True}
        return body


@tool_fault
class FormatDrift(FieldFault):
    """A date, amount or word of the response in another format. Recovered by parsing it back to the canonical
    format."""

    kind = "format_drift"
    recovery = "normalize_format"

    def fields(self, site: Site) -> list[tuple[str, Any]]:
        return [(p, v) for p, v in super().fields(site) if drift_styles(v)]

    def on_field(self, site: Site, rng: random.Random, path: str, value: Any, bites: bool) -> Transform:
        after = drift(value, style := rng.choice(drift_styles(value)))
        return self.transform(site, {"path": path, "style": style, "before": value, "after": after},
                              f"'{path}' is written as {after!r}; parse it back to the canonical {value!r}.", bites)

    def edit(self, node: Any, key: Any, changed: Mapping[str, Any]) -> None:
        node[key] = drift(node[key], changed["style"])


@tool_fault
class RenamedField(FieldFault):
    """A field of the response under another spelling (camelCase, UPPER, ...). Recovered by resolving the
    alias."""

    kind = "renamed_field"
    recovery = "resolve_alias"

    def fields(self, site: Site) -> list[tuple[str, Any]]:
        return [(p, v) for p, v in super().fields(site) if not str(_split_path(p)[-1]).isdigit()]

    def on_field(self, site: Site, rng: random.Random, path: str, value: Any, bites: bool) -> Transform:
        name = str(_split_path(path)[-1])
        renamed = alias(name, rng.choice([s for s in ALIAS_STYLES if alias(name, s) != name]))
        return self.transform(site, {"path": path, "renamed_to": renamed},
                              f"'{renamed}' is the field '{name}' spelled differently.", bites)

    def edit(self, node: Any, key: Any, changed: Mapping[str, Any]) -> None:
        node[changed["renamed_to"]] = node.pop(key)


@tool_fault
class Truncation(PartialResponse):
    """A record cut in two halves with ``continuation_token``; the agent passes it back for the rest."""

    kind = "truncation"
    token_arg = CONTINUATION_TOKEN

    def part_size(self, site: Site, rng: random.Random) -> int | None:
        out = site.output
        fits = isinstance(out, dict) and len(out) >= 2 and _list_key(out) is None
        return len(out) // 2 if fits else None

    def split(self, result: Any, size: int) -> list[Any] | None:
        """The record's keys in two halves."""
        if not isinstance(result, dict) or len(result) < 2:
            return None
        keys = list(result)
        return [{k: result[k] for k in keys[:size]}, {k: result[k] for k in keys[size:]}]

    def part(self, fault: Transform, part: Any, token: str | None) -> dict[str, Any]:
        body = {"data": part}
        if token is not None:
            body |= {fault.changed["token_arg"]: token, "truncated": True}
        return body


def _list_key(result: Any) -> str | None:
    """The key of the list a paged read returns (``{"results": [...], ...}``), None when there is none."""
    if isinstance(result, dict):
        return next((k for k, v in result.items() if isinstance(v, list) and len(v) >= 2), None)
    return None


# ----------------------------------------------------------------------------------------------------------------
# drawing a schedule from a clean replay


def draw_tool_fault(
    kind: str,
    golden: Sequence[Mapping[str, Any]],
    outputs: Sequence[Any],
    rng: random.Random,
    max_failures: int,
    taken: set[tuple[str, int]],
    writes: frozenset[str] = frozenset(),
) -> Transform | str:
    """One fault of ``kind`` on a golden step whose clean output fits it, or the reason none fits.

    Faults that hide information a later golden step needs (that bite) are preferred over those that do not;
    ``taken`` holds the steps whose response a fault already withholds, so two faults never fight over one
    response; ``writes`` names write tools, whose responses are never withheld for a re-query (a repeated write
    would apply twice).
    """
    declared = TOOL_FAULTS[kind]
    steps = [i for i in range(len(golden)) if ("call", i) not in taken]
    rng.shuffle(steps)
    candidates = [(step, fault) for step in steps
                  if (fault := declared.draw(Site.of(step, golden, outputs, max_failures, writes), rng)) is not None]
    if not candidates:
        return f"no golden step returns a response {kind} applies to"
    step, fault = next(((s, f) for s, f in candidates if f.bites), candidates[0])
    if declared.withholds:
        taken.add(("call", step))
    return fault


def parse_content(content: Any) -> Any:
    """A tool message's content as JSON when it is JSON text, else unchanged."""
    if isinstance(content, str):
        try:
            return json.loads(content)
        except json.JSONDecodeError:
            return content
    return content


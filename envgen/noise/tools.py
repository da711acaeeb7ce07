"""Tool noise: a seeded fault schedule applied around the runtime's tool execution.

LongCat-Flash-Thinking-2601, section 3.3.3: tool noise simulates "execution failures, inconsistent responses, and
partial results from external tools" (API timeouts, malformed responses, missing fields, stochastic failures).
Every fault here is recoverable by construction, and the schedule is a list of
:class:`~envgen.noise.records.Transform` stored in the task's ``noise`` record, so the verifier knows exactly
what was injected:

==================  ===========================================================  =========================
kind                what the agent sees                                          recovery
==================  ===========================================================  =========================
latency             the normal result; a simulated latency is recorded           none (nothing to do)
transient_failure   ``{"error": {"type": "timeout"|"server_error", ...}}`` for   retry the same call
                    the first ``failures`` attempts, without executing the call
missing_field       the first response lacks a field                             call again
pagination          a first page of a list and ``next_page_token``               pass ``page_token``
truncation          a record cut in two with ``continuation_token``              pass ``continuation_token``
renamed_field       a field under another spelling (camelCase, UPPER, ...)        resolve the alias
format_drift        a date, amount or word in another format                     normalize the format
==================  ===========================================================  =========================

Faults are keyed by tool and arguments (continuation arguments excluded) and count attempts per key, so a
retry, a re-query and a page request all see a consistent, deterministic response whatever else the agent calls
in between. Latency is simulated: recorded in the events, never slept.
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
from typing import Any

from data_contracts.content import canonical_json
from envgen.noise.instruction import leaves
from envgen.noise.records import Transform

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
        latency = sum(int(f.changed["latency_ms"]) for f in faults if f.kind == "latency")
        if latency:
            events.append({"kind": "latency", "tool": name, "latency_ms": latency})
        for fault in faults:
            if fault.kind == "transient_failure" and attempt < int(fault.changed["failures"]):
                events.append({"kind": fault.kind, "tool": name, "attempt": attempt})
                error = fault.changed["error"]
                message = "upstream timed out" if error == "timeout" else "internal server error (503)"
                return ToolResponse(
                    {"error": {"type": error, "message": f"{message}; the request was not applied", "retryable": True}},
                    events, latency,
                )
        try:
            result = execute(name, arguments)
        except Exception as exc:  # noqa: BLE001 - any failure of the real tool is infrastructure, labelled so
            return ToolResponse(
                {"error": {"type": "infrastructure", "message": f"{type(exc).__name__}: {exc}", "retryable": True}},
                [*events, {"kind": "infrastructure", "tool": name, "error": repr(exc)}], latency, repr(exc),
            )
        for fault in faults:
            result = self._apply(fault, result, attempt, events, key)
        return ToolResponse(result, events, latency)

    def _apply(self, fault: Transform, result: Any, attempt: int, events: list[dict[str, Any]], key: str) -> Any:
        changed = fault.changed
        if fault.kind in _FIELD_EDITS and (fault.kind != "missing_field" or attempt == 0):
            result = copy.deepcopy(result)
            where = _container(result, changed["path"])
            if where is None:
                return result
            try:
                _FIELD_EDITS[fault.kind](where[0], where[1], changed)
            except (KeyError, IndexError, TypeError):  # the response lacks the field (an error, another row)
                return result
            events.append({"kind": fault.kind, "tool": fault.tool, "path": changed["path"]})
        elif fault.kind in ("pagination", "truncation"):
            parts = _parts(fault, result)
            if parts is not None:
                self._pending[f"{key}#{fault.kind}"] = parts
                events.append({"kind": fault.kind, "tool": fault.tool, "parts": len(parts)})
                return self._part(fault, key, 0)
        return result

    def _part(self, fault: Transform, key: str, index: int) -> dict[str, Any]:
        parts = self._pending[f"{key}#{fault.kind}"]
        token_arg = fault.changed["token_arg"]
        body = dict(parts[index]) if fault.kind == "pagination" else {"data": parts[index]}
        if index + 1 < len(parts):
            token = hashlib.blake2b(f"{key}#{fault.kind}#{index + 1}".encode(), digest_size=6).hexdigest()
            self._tokens[token] = (fault, key, index + 1)
            body[f"next_{token_arg}" if fault.kind == "pagination" else token_arg] = token
            body["truncated"] = True
        return body

    def _continue(self, name: str, token: str, events: list[dict[str, Any]]) -> ToolResponse:
        fault, key, index = self._tokens.get(token, (None, "", 0))
        if fault is None or fault.tool != name:
            return ToolResponse({"error": {"type": "invalid_argument", "retryable": False,
                                           "message": f"unknown continuation token {token!r} for {name}"}}, events)
        events.append({"kind": fault.kind, "tool": name, "part": index})
        return ToolResponse(self._part(fault, key, index), events)


def _rename(node: Any, key: Any, changed: Mapping[str, Any]) -> None:
    node[changed["renamed_to"]] = node.pop(key)


def _redrift(node: Any, key: Any, changed: Mapping[str, Any]) -> None:
    node[key] = drift(node[key], changed["style"])


# In-place edits of the field at a fault's path: (container, key, fault.changed) -> None; raise when it is absent.
_FIELD_EDITS: dict[str, Callable[[Any, Any, Mapping[str, Any]], None]] = {
    "missing_field": lambda node, key, _: node.pop(key),
    "renamed_field": _rename,
    "format_drift": _redrift,
}


def _list_key(result: Any) -> str | None:
    """The key of the list a paged read returns (``{"results": [...], ...}``), None when there is none."""
    if isinstance(result, dict):
        return next((k for k, v in result.items() if isinstance(v, list) and len(v) >= 2), None)
    return None


def _parts(fault: Transform, result: Any) -> list[Any] | None:
    """Split a result for a partial response: pages of its list (the rest of the record repeated on each page),
    or a record's keys in two halves."""
    size = int(fault.changed["part_size"])
    if fault.kind == "pagination":
        key = _list_key(result)
        if key is None or len(result[key]) <= size:
            return None
        items = result[key]
        return [{**result, key: items[i : i + size]} for i in range(0, len(items), size)]
    if not isinstance(result, dict) or len(result) < 2:
        return None
    keys = list(result)
    return [{k: result[k] for k in keys[:size]}, {k: result[k] for k in keys[size:]}]


# ----------------------------------------------------------------------------------------------------------------
# drawing a schedule from a clean replay


def _used_later(golden: Sequence[Mapping[str, Any]], step: int, value: Any) -> bool:
    return any(value in a.get("arguments", {}).values() for a in golden[step + 1 :])


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
    steps = [i for i in range(len(golden)) if ("call", i) not in taken]
    rng.shuffle(steps)
    candidates = [(step, fault) for step in steps
                  if (fault := _fault_at(kind, step, golden, outputs, rng, max_failures, writes)) is not None]
    if not candidates:
        return f"no golden step returns a response {kind} applies to"
    step, fault = next(((s, f) for s, f in candidates if f.bites), candidates[0])
    if kind in _WITHHOLDING:
        taken.add(("call", step))
    return fault


_WITHHOLDING = frozenset({"transient_failure", "pagination", "truncation", "missing_field"})


def _fault_at(kind: str, step: int, golden: Sequence[Mapping[str, Any]], outputs: Sequence[Any],
              rng: random.Random, max_failures: int, writes: frozenset[str]) -> Transform | None:
    """The fault of ``kind`` on golden step ``step``, or None when its response does not fit it."""
    action, out = golden[step], outputs[step]
    base = {"family": "tool", "kind": kind, "tool": action["name"], "arguments": dict(action.get("arguments", {}))}
    needed = {v for _, v in leaves(out) if _used_later(golden, step, v)}
    if kind == "latency":
        return Transform(**base, changed={"latency_ms": rng.choice([800, 2500, 6000, 15000])}, recovery="none",
                         hint="The response is slow but complete; wait for it.", bites=False)
    if kind == "transient_failure":
        failures = rng.randint(1, max_failures)
        error = rng.choice(["timeout", "server_error"])
        # At higher intensity the whole tool is flaky: every call, whatever its arguments, fails its first
        # attempts, so a policy cannot dodge the fault by reaching the data another way.
        flaky = max_failures > 1 and rng.random() < 0.5
        where = f"every call of {action['name']}" if flaky else "this call"
        return Transform(**{**base, "arguments": None if flaky else base["arguments"]},
                         changed={"failures": failures, "error": error, "tool_wide": flaky}, recovery="retry",
                         hint=f"The first {failures} attempt(s) of {where} fail with a retryable {error}; call again.",
                         bites=action["name"] in writes or bool(needed))
    if kind in ("pagination", "truncation"):
        if kind == "pagination" and _list_key(out) is None:
            return None
        if kind == "truncation" and not (isinstance(out, dict) and len(out) >= 2 and _list_key(out) is None):
            return None
        n = len(out[_list_key(out)]) if kind == "pagination" else len(out)
        token_arg = PAGE_TOKEN if kind == "pagination" else CONTINUATION_TOKEN
        fault = Transform(
            **base, changed={"part_size": rng.randint(1, n - 1) if kind == "pagination" else n // 2,
                             "token_arg": token_arg},
            recovery="follow_continuation",
            hint=f"The response comes in parts; call again with {token_arg} until no token is returned.",
        )
        first = {v for _, v in leaves((_parts(fault, out) or [out])[0])}
        return fault.model_copy(update={"bites": not needed <= first})
    if kind == "missing_field" and action["name"] in writes:
        return None
    fields = [(p, v) for p, v in leaves(out) if p and not isinstance(v, bool) and v is not None
              and not (kind == "renamed_field" and str(_split_path(p)[-1]).isdigit())]
    if kind == "format_drift":
        fields = [(p, v) for p, v in fields if drift_styles(v)]
    if not fields:
        return None
    biting = [pv for pv in fields if pv[1] in needed]
    path, value = rng.choice(biting or fields)
    name = str(_split_path(path)[-1])
    if kind == "missing_field":
        return Transform(**base, changed={"path": path}, recovery="requery", bites=bool(biting),
                         hint=f"The first response omits '{path}'; call again for the complete record.")
    if kind == "renamed_field":
        renamed = alias(name, rng.choice([s for s in ALIAS_STYLES if alias(name, s) != name]))
        return Transform(**base, changed={"path": path, "renamed_to": renamed}, recovery="resolve_alias",
                         bites=bool(biting), hint=f"'{renamed}' is the field '{name}' spelled differently.")
    after = drift(value, style := rng.choice(drift_styles(value)))
    return Transform(
        **base, changed={"path": path, "style": style, "before": value, "after": after},
        recovery="normalize_format", bites=bool(biting),
        hint=f"'{path}' is written as {after!r}; parse it back to the canonical {value!r}.",
    )


def parse_content(content: Any) -> Any:
    """A tool message's content as JSON when it is JSON text, else unchanged."""
    if isinstance(content, str):
        try:
            return json.loads(content)
        except json.JSONDecodeError:
            return content
    return content


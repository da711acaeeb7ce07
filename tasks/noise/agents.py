"""Scripted reference agents: TEST DOUBLES that measure solvability, never a policy a user trains or serves.

The solvability constraint of LongCat-Flash-Thinking-2601, section 3.3.3 ("the injected imperfections do not
invalidate task solvability") is checked by execution: each noisy task is run by two scripted agents that follow
the task's golden plan through the real environment, talking only in OpenAI chat messages.

- :class:`RobustReferenceAgent` retries retryable errors, follows continuation tokens, re-queries a response that
  lacks what a later step needs, reads values under renamed fields and in drifted formats, maps synonyms back,
  and asks the user for what the text no longer says. Every noisy task must pass with it.
- :class:`NaiveReferenceAgent` does none of that: it takes a value only when it sees it written exactly as the
  plan needs it, never retries and never asks. Its success drop per transform shows whether a noise bites.

Both know the golden plan but must *find* every argument value in what they observe (user messages and tool
outputs) before using it; arguments that are not observable even in the clean task (``observable`` excludes them)
are plan knowledge and used as is. So a noisy task is solvable exactly when noise hides nothing a robust agent
could see in the clean twin.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from envgen.noise.instruction import LEXICON, leaves, mentions, surfaces
from envgen.noise.tools import CONTINUATION_ARGS, DATE_FORMATS, parse_content
from envgen.tools import render_value

Message = dict[str, Any]
RETRYABLE = frozenset({"timeout", "server_error", "infrastructure"})
_LOWER_WORD = re.compile(r"^[a-z][a-z_]*$")
_SNAKE = re.compile(r"^([a-z][a-z0-9_]*|\d+)$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def canonicalize(observed: Any, like: Any) -> Any:
    """``observed`` parsed back to the canonical format of ``like`` (an ISO date, a number, a lowercase word).

    Only the *format* of ``like`` is used: a date-shaped ``like`` makes US, long and compact dates ISO again, a
    number makes '$1,234.50' 1234.5, a lowercase word lowercases. Anything else is returned unchanged."""
    if isinstance(like, bool) or like is None:
        return observed
    if isinstance(like, str) and _NUMBER.match(like):  # an amount rendered as text ('2408.40')
        number = canonicalize(observed, float(like))
        decimals = len(like.partition(".")[2])
        return f"{number:.{decimals}f}" if isinstance(number, (int, float)) else observed
    if isinstance(like, (int, float)):
        if isinstance(observed, str):
            try:
                number = float(observed.replace("$", "").replace(",", "").strip())
            except ValueError:
                return observed
            return int(number) if isinstance(like, int) and number.is_integer() else number
        return observed
    if not isinstance(like, str) or not isinstance(observed, str):
        return observed
    for parse, width in ((date.fromisoformat, 10), (datetime.fromisoformat, 19)):
        try:
            parse(like)
        except ValueError:
            continue
        suffix = "" if width == 10 else " %H:%M:%S"
        for fmt in ("%Y-%m-%d" + ("" if width == 10 else "T%H:%M:%S"), *(f + suffix for f in DATE_FORMATS.values())):
            try:
                parsed = datetime.strptime(observed, fmt)
            except ValueError:
                continue
            return parsed.date().isoformat() if width == 10 else parsed.isoformat()
        return observed
    if _LOWER_WORD.match(like):
        return observed.lower()
    return observed


@dataclass
class Observations:
    """What an agent has seen: user text and tool outputs (tool outputs as parsed JSON)."""

    user_text: list[str] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)

    def find(self, value: Any, robust: bool) -> bool:
        """Whether ``value`` can be read off the observations (robustly: through formats and synonyms)."""
        # The naive agent reads fields only under their documented snake_case names; the robust one reads a value
        # under any spelling of its field.
        if any(_same(leaf, value) and (robust or all(_SNAKE.match(part) for part in path.split(".")))
               for o in self.outputs for path, leaf in leaves(o)):
            return True
        text = "\n".join(self.user_text)
        if not robust:
            return any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", text) for s in surfaces(value))
        if any(canonicalize(leaf, value) == value for o in self.outputs for _, leaf in leaves(o)):
            return True
        spoken = [*surfaces(value)]
        if isinstance(value, str):
            spoken += [value.replace("_", " "), *LEXICON.get(value, ())]
        return any(mentions(text, s) for s in spoken if s)


def _same(leaf: Any, value: Any) -> bool:
    """Literally the same value: equal, or the same text once rendered the way task records render numbers."""
    if isinstance(leaf, bool) or isinstance(value, bool):
        return leaf is value
    return leaf == value or (isinstance(value, str) and isinstance(leaf, (int, float)) and render_value(leaf) == value)


@dataclass
class _Call:
    step: int
    name: str
    arguments: dict[str, Any]
    attempts: int = 0
    parts: list[Any] = field(default_factory=list)


class ReferenceAgent:
    """The shared loop: resolve the next golden step's arguments from observations, call, read the response."""

    robust: bool

    def __init__(self, golden: Sequence[Mapping[str, Any]], required_outputs: Sequence[Any] = (),
                 writes: frozenset[str] = frozenset(), observable: set[str] | None = None,
                 max_retries: int = 4) -> None:
        self.golden = [{"name": a["name"], "arguments": dict(a.get("arguments", {}))} for a in golden]
        self.required_outputs = list(required_outputs)
        self.writes = writes
        self.observable = observable
        self.max_retries = max_retries
        self.seen = Observations()
        self.step = 0
        self.call: _Call | None = None
        self.asked: set[str] = set()
        self.requeried: set[int] = set()
        self.resolved: set[str] = set()  # "step.arg" found in observations
        self.unresolved: set[str] = set()  # used as plan knowledge (survey mode only)
        self.gave_up: str | None = None
        self.retries = 0
        self._ids = 0

    # -- reading -----------------------------------------------------------------------------------------------

    def observe(self, messages: Sequence[Message]) -> None:
        """Take in the messages the environment added since the last action."""
        for message in messages:
            if message.get("role") == "user" and message.get("content"):
                self.seen.user_text.append(str(message["content"]))
            elif message.get("role") == "tool":
                self._on_tool(parse_content(message.get("content")))

    def _on_tool(self, content: Any) -> None:
        call = self.call
        if call is None:
            self.seen.outputs.append(content)
            return
        error = content.get("error") if isinstance(content, dict) else None
        if error is not None and self.robust and _retryable(error) and call.attempts <= self.max_retries:
            self.retries += 1
            return  # the same call goes out again
        token = _continuation(content) if self.robust and error is None else None
        if token is not None:
            call.parts.append(content)
            return
        if call.parts:
            content = _merge([*call.parts, content])
        self.seen.outputs.append(content)
        if call.step == self.step and error is None:
            self.step += 1
        elif call.step == self.step and not self.robust:
            self.step += 1  # the naive agent moves on, result or not
        elif call.step == self.step:
            self.gave_up = f"step {call.step} ({call.name}) kept failing: {error}"
        self.call = None

    # -- acting ------------------------------------------------------------------------------------------------

    def act(self) -> Message:
        """The next assistant message: a tool call, a question to the user, or the final answer."""
        if self.gave_up is not None or self.step >= len(self.golden):
            return self._final()
        if self.call is not None:
            return self._send(self.call, token=_continuation(self.call.parts[-1]) if self.call.parts else None)
        action = self.golden[self.step]
        missing = [arg for arg, value in action["arguments"].items() if not self._resolve(self.step, arg, value)]
        if not missing:
            self.call = _Call(self.step, action["name"], action["arguments"])
            return self._send(self.call)
        if not self.robust:
            self.gave_up = f"step {self.step} ({action['name']}): cannot see {missing}"
            return self._final()
        requery = next(
            (j for j in range(self.step) if j not in self.requeried and self.golden[j]["name"] not in self.writes), None
        )
        if requery is not None:
            # A response may have lacked a field on the first try: ask for the earlier records again.
            self.requeried.add(requery)
            self.call = _Call(-1, self.golden[requery]["name"], self.golden[requery]["arguments"])
            return self._send(self.call)
        ask = [arg for arg in missing if f"{self.step}.{arg}" not in self.asked]
        if ask:
            self.asked.update(f"{self.step}.{arg}" for arg in ask)
            words = " and ".join(f"{a.replace('_', ' ')} ({a})" for a in ask)
            return {"role": "assistant", "content": f"Could you tell me your {words}, please?"}
        if self.observable is None:
            self.unresolved.update(f"{self.step}.{arg}" for arg in missing)
            self.call = _Call(self.step, action["name"], action["arguments"])
            return self._send(self.call)
        self.gave_up = f"step {self.step} ({action['name']}): {missing} not recoverable"
        return self._final()

    def _resolve(self, step: int | str, arg: str, value: Any) -> bool:
        key = f"{step}.{arg}"
        if key in self.resolved or isinstance(value, bool) or value is None:
            return True
        if self.observable is not None and key not in self.observable:
            return True  # plan knowledge: not observable even in the clean task
        if self.seen.find(value, self.robust):
            self.resolved.add(key)
            return True
        return key in self.unresolved

    def _send(self, call: _Call, token: str | None = None) -> Message:
        call.attempts += 1
        arguments = dict(call.arguments)
        if token is not None:
            arguments[token_arg(call.parts[-1])] = token
        self._ids += 1
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{
                "id": f"call_{self._ids}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(arguments, sort_keys=True)},
            }],
        }

    def _final(self) -> Message:
        if self.gave_up:
            return {"role": "assistant", "content": "I could not complete the request."}
        # Report the rubric's required outputs that can be read off the observations, in canonical form.
        seen = [self._resolve("out", str(i), v) for i, v in enumerate(self.required_outputs)]
        if self.observable is None:  # survey: what cannot be seen is plan knowledge
            self.unresolved.update(f"out.{i}" for i, ok in enumerate(seen) if not ok)
            seen = [True] * len(seen)
        told = [str(v) for v, ok in zip(self.required_outputs, seen) if ok]
        return {"role": "assistant", "content": f"Your request is complete. Details: {', '.join(told) or 'none'}."}


class RobustReferenceAgent(ReferenceAgent):
    """Scripted test double: follows the golden plan, retries, paginates, re-queries, normalizes, asks."""

    robust = True


class NaiveReferenceAgent(ReferenceAgent):
    """Scripted test double: follows the golden plan literally; no retries, no questions, no normalization."""

    robust = False


def _retryable(error: Any) -> bool:
    if isinstance(error, dict):
        return bool(error.get("retryable")) or error.get("type") in RETRYABLE
    return any(word in str(error).lower() for word in ("timeout", "timed out", "try again", "internal error"))


def _continuation(content: Any) -> str | None:
    if isinstance(content, dict):
        for arg in CONTINUATION_ARGS:
            for key in (f"next_{arg}", arg):
                if content.get(key):
                    return str(content[key])
    return None


def token_arg(content: Mapping[str, Any]) -> str:
    return next(a for a in CONTINUATION_ARGS if content.get(f"next_{a}") or content.get(a))


def _merge(parts: list[Any]) -> Any:
    """Reassemble a partial response: concatenate pages of the same list, or join record halves."""
    drop = {*CONTINUATION_ARGS, *(f"next_{a}" for a in CONTINUATION_ARGS), "truncated"}
    if all(isinstance(p, dict) and "data" in p for p in parts):
        return {k: v for p in parts for k, v in p["data"].items()}
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key in drop:
                continue
            if isinstance(value, list) and isinstance(merged.get(key), list):
                merged[key] = merged[key] + value
            else:
                merged[key] = value
    return merged

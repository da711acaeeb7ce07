"""Test-double engines with known behaviour, for tests across the project. Never a default a user gets.

They speak the ``Engine`` protocol with byte-level token ids (one id per UTF-8 byte of a plain rendering of the
messages), so trajectory records built from them have real, checkable token segments.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference.engine import Completion, Message, Request

SCRIPTED_LOGPROB = math.log(0.5)
"""Every sampled byte of a test double gets this behaviour log-probability."""


def byte_ids(text: str) -> tuple[int, ...]:
    return tuple(text.encode())


def render_plain(messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> str:
    """A deterministic rendering of a prompt, standing in for a chat template."""
    lines = [f"tools: {json.dumps(list(tools), sort_keys=True)}"] if tools else []
    for message in messages:
        body = message.get("content") or ""
        if message.get("tool_calls"):
            body += json.dumps(message["tool_calls"], sort_keys=True)
        lines.append(f"<{message['role']}> {body}")
    return "\n".join(lines) + "\n<assistant> "


@dataclass(frozen=True)
class ScriptedReply:
    """What a scripted policy says: text, and tool calls as ``{"name": ..., "arguments": dict | str}``.

    ``arguments`` given as a string is passed through verbatim, so tests can script malformed JSON.
    """

    text: str = ""
    tool_calls: tuple[Mapping[str, Any], ...] = ()


Policy = Callable[[Request, int], "str | ScriptedReply"]
"""``policy(request, sample_index)`` for ``sample_index`` in ``range(request.sampling.n)``."""


def _openai_tool_calls(reply: ScriptedReply, call_offset: int) -> tuple[dict[str, Any], ...]:
    calls = []
    for i, call in enumerate(reply.tool_calls):
        arguments = call.get("arguments", {})
        calls.append(
            {
                "id": f"call_{call_offset}_{i}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    return tuple(calls)


@dataclass
class ScriptedEngine:
    """A test double answering every request with ``policy(request, sample_index)``; it records the requests."""

    policy: Policy
    policy_version: int = 0
    max_positions: int | None = None
    """A context window, as the transformers engine has; None: unbounded."""
    requests: list[Request] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)

    def render(self, request: Request) -> list[int]:
        return list(byte_ids(render_plain(request.messages, request.tools)))

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        self.batch_sizes.append(len(requests))
        results = []
        for request in requests:
            self.requests.append(request)
            prompt_ids = tuple(self.render(request))
            if self.max_positions is not None and len(prompt_ids) + request.sampling.max_tokens > self.max_positions:
                raise ValueError(f"prompt of {len(prompt_ids)} tokens exceeds {self.max_positions} positions")
            samples = []
            for index in range(request.sampling.n):
                reply = self.policy(request, index)
                if isinstance(reply, str):
                    reply = ScriptedReply(text=reply)
                tool_calls = _openai_tool_calls(reply, len(self.requests))
                rendered = reply.text + "".join(json.dumps(c["function"]) for c in tool_calls)
                ids = byte_ids(rendered)[: request.sampling.max_tokens]
                samples.append(
                    Completion(
                        text=reply.text,
                        token_ids=ids,
                        logprobs=(SCRIPTED_LOGPROB,) * len(ids),
                        finish_reason="tool_calls" if tool_calls else "stop",
                        policy_version=self.policy_version,
                        prompt_token_ids=prompt_ids,
                        tool_calls=tool_calls,
                    )
                )
            results.append(samples)
        return results

    def close(self) -> None:
        pass


def last_user_content(request: Request) -> str:
    return next(str(m.get("content", "")) for m in reversed(request.messages) if m["role"] == "user")


@dataclass
class BernoulliTestEngine:
    """A test double that answers item ``key`` correctly with a known probability ``p``.

    ``items`` maps the key (by default the last user message) to ``(p, right_answer)``. With ``exact=True`` an
    item with ``n`` samples per request succeeds on exactly ``round(p * n)`` of them (the first ones), so a filter's
    pass counts are known in advance; otherwise each sample is a Bernoulli draw seeded by the request seed.
    Wrong samples box ``wrong_answer``; unknown keys raise, so a test cannot pass by accident.
    """

    items: Mapping[str, tuple[float, str]]
    exact: bool = True
    wrong_answer: str = "zzyzx"
    key: Callable[[Request], str] = last_user_content
    policy_version: int = 0

    def __post_init__(self) -> None:
        self._scripted = ScriptedEngine(self._answer, self.policy_version)

    @property
    def requests(self) -> list[Request]:
        return self._scripted.requests

    @property
    def batch_sizes(self) -> list[int]:
        return self._scripted.batch_sizes

    def _answer(self, request: Request, index: int) -> str:
        key = self.key(request)
        if key not in self.items:
            raise KeyError(f"BernoulliTestEngine has no item for key {key[:80]!r}")
        p, right = self.items[key]
        if self.exact:
            success = index < round(p * request.sampling.n)
        else:
            success = random.Random(f"{request.sampling.seed}/{index}").random() < p
        return f"The answer is \\boxed{{{right if success else self.wrong_answer}}}"

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        return self._scripted.generate(requests)

    def close(self) -> None:
        pass


@dataclass
class HeavyTestEngine:
    """A test double for Heavy Thinking with known skills: a trajectory answers item ``key`` right with probability
    ``p`` (a Bernoulli draw seeded by the request seed and sample index; wrong ones box one of ``wrong_answers``);
    a summary request (its last message lists attempts, ``inference.heavy_thinking``) boxes the right answer with
    probability ``summary_skill`` when any attempt holds it, else the attempts' most common answer. So
    self-consistency, best-of-k and Heavy Thinking have accuracies computable in advance."""

    items: Mapping[str, tuple[float, str]]
    summary_skill: float = 0.9
    wrong_answers: tuple[str, ...] = ("zzyzx", "qwxyz", "xqzzy")
    policy_version: int = 0

    def __post_init__(self) -> None:
        self._scripted = ScriptedEngine(self._answer, self.policy_version)

    @property
    def requests(self) -> list[Request]:
        return self._scripted.requests

    def _answer(self, request: Request, index: int) -> str:
        rng = random.Random(f"{request.sampling.seed}/{index}")
        last = str(request.messages[-1].get("content", ""))
        if "### Attempt 1" in last:
            key = last_user_content(replace_last(request))
            right = self.items[key][1]
            boxed = [a.split("\\boxed{", 1)[1].split("}", 1)[0] for a in last.split("### Attempt")[1:]
                     if "\\boxed{" in a]
            if right in boxed and rng.random() < self.summary_skill:
                return f"Checked the attempts. \\boxed{{{right}}}"
            common = max(boxed, key=boxed.count) if boxed else self.wrong_answers[0]
            return f"Most attempts agree. \\boxed{{{common}}}"
        key = last_user_content(request)
        if key not in self.items:
            raise KeyError(f"HeavyTestEngine has no item for key {key[:80]!r}")
        p, right = self.items[key]
        answer = right if rng.random() < p else rng.choice(self.wrong_answers)
        return f"Working it out. \\boxed{{{answer}}}"

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        return self._scripted.generate(requests)

    def close(self) -> None:
        pass


def replace_last(request: Request) -> Request:
    """The request without its last message (a summary request's original conversation)."""
    return Request(list(request.messages[:-1]), request.tools, request.sampling)

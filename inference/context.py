"""Context management for long agentic rollouts (LongCat-Flash-Thinking-2601, section 3.3, "Context Management for
Agentic Training").

- summary: when the context passes a token threshold (the report's optimum is 80K), the history is distilled into a
  summary (ReSum) — written by the policy itself from a summarization prompt, or extractively when configured — and
  generation continues from the system prompt, the task and the summary;
- discard: when the interaction passes a maximum number of turns (counted from the start or the last reset), a
  "discard-all" reset restarts from the system prompt and the task (DeepSeek-V3.2); the progressive schedule raises
  that maximum after each reset;
- hybrid: summary whenever the token threshold is passed, discard-all when the turn limit is passed.

Each summary or reset starts a new rollout segment under the same rollout and group id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import Field, model_validator

from data_contracts.stage import Params
from inference.engine import Message, Request, SamplingParams
from inference.rollout import Segment

Strategy = Literal["none", "summary", "discard", "hybrid"]
Action = Literal["keep", "summarize", "reset"]

SUMMARY_INSTRUCTION = (
    "Summarize the interaction so far for your own later use: the facts learned from tool results (ids, names, "
    "values), the actions already taken and what remains to be done. Be concise; do not call tools."
)
SUMMARY_PREFIX = "Summary of the work so far (earlier context was compressed):\n"


class ContextConfig(Params):
    strategy: Strategy = Field("none", description="none | summary | discard | hybrid (the report's choice)")
    summary_threshold_tokens: int = Field(
        80_000, gt=0, description="summarize once the context reaches this many tokens (report: 80K is optimal)"
    )
    discard_after_turns: int = Field(
        32, gt=0, description="discard-all reset after this many agent turns since the start or the last reset "
        "(summaries compress tokens, they do not reset this count)",
    )
    discard_growth: int = Field(
        0, ge=0, description="progressive discard schedule: the turn limit grows by this much after each reset"
    )
    max_resets: int = Field(2, ge=0, description="bound on summaries plus resets (new segments) per rollout")
    summarizer: Literal["engine", "extractive"] = Field(
        "engine", description="engine: the policy writes the summary; extractive: a deterministic digest"
    )
    summary_max_tokens: int = Field(256, gt=0, description="output budget of an engine-written summary")
    extractive_chars_per_result: int = Field(
        200, gt=0, description="extractive digest: characters kept from each tool result"
    )

    @model_validator(mode="after")
    def _summary_needs_budget(self) -> ContextConfig:
        if self.strategy in ("summary", "hybrid") and self.summary_max_tokens >= self.summary_threshold_tokens:
            raise ValueError(
                "summary_max_tokens must be below summary_threshold_tokens, or every summary re-triggers compression"
            )
        return self


def decide(config: ContextConfig, segments: Sequence[Segment]) -> Action:
    """What to do before the next agent turn of a rollout whose segments so far are ``segments``."""
    current = segments[-1]
    if config.strategy == "none" or len(segments) - 1 >= config.max_resets or not current.turns:
        return "keep"
    if config.strategy in ("discard", "hybrid"):
        resets = sum(segment.start == "reset" for segment in segments)
        since_reset = next(i for i in range(len(segments) - 1, -1, -1) if segments[i].start != "summary")
        turns = sum(segment.n_agent_turns() for segment in segments[since_reset:])
        if turns >= config.discard_after_turns + config.discard_growth * resets:
            return "reset"
    # The exact token count of the context as the engine last saw it (prompt + output of the last call).
    if config.strategy in ("summary", "hybrid") and current.n_tokens() >= config.summary_threshold_tokens:
        return "summarize"
    return "keep"


def summary_request(context: Sequence[Message], tools: Sequence[dict], sampling: SamplingParams,
                    config: ContextConfig) -> Request:
    """The policy reads the whole history and writes the summary (ReSum)."""
    messages = [*context, {"role": "user", "content": SUMMARY_INSTRUCTION}]
    budget = replace(sampling, max_tokens=config.summary_max_tokens, n=1)
    return Request(messages=messages, tools=tools, sampling=budget)


def extractive_summary(history: Sequence[Message], chars_per_result: int) -> str:
    """A deterministic digest of the history after the task: each tool call with its arguments and the start of its
    result, and the assistant's last words."""
    lines = []
    names: dict[str, str] = {}
    last_text = ""
    for message in history:
        if message["role"] == "assistant":
            for call in message.get("tool_calls") or ():
                fn = call["function"]
                names[call.get("id", "")] = fn["name"]
                lines.append(f"- called {fn['name']}({_compact(fn.get('arguments', ''))})")
            if message.get("content"):
                last_text = str(message["content"])
        elif message["role"] == "tool":
            name = names.get(message.get("tool_call_id", ""), "tool")
            lines.append(f"  {name} returned: {str(message.get('content', ''))[:chars_per_result]}")
    if last_text:
        lines.append(f"- last note: {last_text[:chars_per_result]}")
    return "\n".join(lines) or "- nothing done yet"


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError):
        return str(arguments)


def restart_context(initial: Sequence[Message], summary: str | None) -> list[Message]:
    """The new segment's context: the system prompt and task, plus the summary when compressing."""
    messages = [dict(m) for m in initial]
    if summary is not None:
        messages.append({"role": "user", "content": SUMMARY_PREFIX + summary})
    return messages

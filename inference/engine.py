"""The Engine interface: every training, filtering and evaluation stage samples through it.

Implementations: transformers (``hf:DIR``), OpenAI-compatible HTTP (``openai:URL#MODEL``), in-process vLLM
(``vllm:DIR``, GPU extra). Tests may use scripted engines with known behaviour; those are test doubles, named so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Message = dict[str, Any]
"""An OpenAI chat message: role, content, optional tool_calls / tool_call_id / name."""

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    messages: Sequence[Message]
    tools: Sequence[dict[str, Any]] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass(frozen=True)
class Completion:
    """One sample. ``logprobs[i]`` is the log-probability of ``token_ids[i]`` under the sampling distribution
    (temperature and top-p applied), which is what importance weights in asynchronous RL need."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    policy_version: int
    prompt_token_ids: tuple[int, ...] = ()
    tool_calls: tuple[dict[str, Any], ...] = ()


class Engine(Protocol):
    policy_version: int

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        """One list of ``request.sampling.n`` completions per request, in request order."""
        ...

    def close(self) -> None: ...

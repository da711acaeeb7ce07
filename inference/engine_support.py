"""What every engine shares: prompt rendering, tool-call output, the completion and request checks, and the
one error an engine that cannot serve raises. Engines (:mod:`inference.hf_engine`, :mod:`inference.http_engine`,
:mod:`inference.vllm_engine`) import this; the factory that picks one (:mod:`inference.engine_factory`) sits above them.

Every engine renders a request the same way (the checkpoint's chat template with the request's tools, then
``add_generation_prompt``) and returns completions in the same shape: ``text`` is the assistant message content
with any parsed tool-call markup removed, ``tool_calls`` are in the OpenAI format, so the next assistant message of
a conversation is :func:`assistant_message` of the completion. Token ids and logprobs stay the source of truth.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inference.engine import Completion, FinishReason, Request

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TOOL_CALL_OPEN = "<tool_call>"


class EngineUnavailable(ValueError):
    """An engine spec that is malformed, or an engine that cannot serve: one line naming it and what to do."""


def render_prompt(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
) -> list[int]:
    """Prompt token ids: the chat template with tools and the assistant generation prompt."""
    if not messages:
        raise ValueError("a request needs at least one message")
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], tools=list(tools) or None, add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Token ids that end a generation: eos, ``<|im_end|>`` (end of turn) and ``<|endoftext|>`` where present."""
    ids = {tokenizer.eos_token_id}
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>") if t in vocab)
    ids.discard(None)
    return frozenset(ids)


def tool_call_id(seed_ids: Sequence[int], index: int) -> str:
    """A deterministic call id: it must differ across turns of a conversation, so it hashes the token ids."""
    digest = hashlib.sha256(json.dumps([list(seed_ids), index]).encode()).hexdigest()
    return f"call_{digest[:24]}"


def split_tool_calls(text: str, id_seed: Sequence[int] = ()) -> tuple[str, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a raw completion. Content is the text before the first ``<tool_call>`` when a
    call parses; a completion whose markup does not parse keeps its raw text (the agent shows it a tool error)."""
    from inference.tokenizer import parse_tool_calls

    calls = parse_tool_calls(text) if TOOL_CALL_OPEN in text else []
    if not calls:
        return text, []
    content = text[: text.index(TOOL_CALL_OPEN)].rstrip()
    openai_calls = [
        {
            "id": tool_call_id(id_seed, i),
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)},
        }
        for i, c in enumerate(calls)
    ]
    return content, openai_calls


def make_completion(
    raw_text: str,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    finish_reason: str,
    policy_version: int,
    prompt_token_ids: Sequence[int],
    parse_tools: bool,
) -> Completion:
    """A :class:`Completion` from a raw sample; tool calls parsed when the request offered tools."""
    if len(token_ids) != len(logprobs):
        raise ValueError(
            f"{len(token_ids)} token ids but {len(logprobs)} logprobs: the engine output is inconsistent"
        )
    text, calls = (
        split_tool_calls(raw_text, [*prompt_token_ids, *token_ids]) if parse_tools else (raw_text, [])
    )
    reason: FinishReason = "tool_calls" if calls else ("length" if finish_reason == "length" else "stop")
    return Completion(
        text=text,
        token_ids=tuple(int(t) for t in token_ids),
        logprobs=tuple(float(x) for x in logprobs),
        finish_reason=reason,
        policy_version=policy_version,
        prompt_token_ids=tuple(int(t) for t in prompt_token_ids),
        tool_calls=tuple(calls),
    )


def assistant_message(completion: Completion) -> dict[str, Any]:
    """The OpenAI assistant message of a completion, ready to append to the conversation."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        message["tool_calls"] = [dict(c) for c in completion.tool_calls]
    return message


def validate_request(request: Request) -> None:
    """Reject sampling settings no engine can honour, naming the field and the allowed range."""
    s = request.sampling
    if s.temperature < 0:
        raise ValueError(f"temperature={s.temperature}: must be >= 0 (0 means greedy)")
    if not 0 < s.top_p <= 1:
        raise ValueError(f"top_p={s.top_p}: must be in (0, 1]")
    if s.max_tokens < 1:
        raise ValueError(f"max_tokens={s.max_tokens}: must be >= 1")
    if s.n < 1:
        raise ValueError(f"n={s.n}: must be >= 1")

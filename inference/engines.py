"""Engine construction from a spec string, and what every engine shares: prompt rendering and tool-call output.

Specs (DESIGN.md section 5):

- ``hf:DIR`` — a local transformers checkpoint, generated in-process (:class:`inference.hf_engine.HFEngine`);
  ``hf:KEY`` — the same for a model artifact of the data root's catalog (``hf:`` and ``vllm:`` both take either).
- ``openai:URL#MODEL`` — any OpenAI-compatible server: ``vllm serve`` or ``gymforge serve``
  (:class:`inference.http_engine.HTTPEngine`). ``URL`` is the API base, e.g. ``http://127.0.0.1:8000/v1``.
- ``vllm:DIR`` — in-process vLLM (optional ``vllm`` extra, CUDA only; :class:`inference.vllm_engine.VLLMEngine`).

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

from inference.engine import Completion, Engine, FinishReason, Request
from inference.engine_spec import EngineSpec, EngineSpecError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TOOL_CALL_OPEN = "<tool_call>"
class EngineUnavailable(ValueError):
    """An engine spec that is malformed, or an engine that cannot serve: one line naming it and what to do."""


def _parsed(spec: str) -> EngineSpec:
    """The spec checked for form only; a malformed one is the :class:`EngineUnavailable` line run-start checks catch."""
    try:
        return EngineSpec.parse(spec)
    except EngineSpecError as exc:
        raise EngineUnavailable(str(exc)) from None


def load_engine(spec: str, policy_version: int = 0, **options: Any) -> Engine:
    """Build the engine a spec names; ``options`` go to the engine's constructor."""
    parsed = _parsed(spec)
    if parsed.kind == "openai":
        from inference.http_engine import HTTPEngine

        return HTTPEngine(parsed.target, str(parsed.model), policy_version=policy_version, **options)
    from inference.checkpoint import resolve_model

    if parsed.kind == "hf":
        from inference.hf_engine import HFEngine

        return HFEngine(resolve_model(parsed.target), policy_version=policy_version, **options)
    from inference.vllm_engine import VLLMEngine

    return VLLMEngine(resolve_model(parsed.target), policy_version=policy_version, **options)


def probe_engine(spec: str, *, weights: bool = False, timeout_s: float = 5.0) -> None:
    """Check, within seconds and without loading a model, that ``spec`` can serve: a checkpoint directory for
    ``hf:``, vLLM and a GPU for ``vllm:``, an endpoint that answers and serves the model for ``openai:``; with
    ``weights``, also that it can load new policy weights (asynchronous RL). Raises :class:`EngineUnavailable`."""
    parsed = _parsed(spec)
    kind, target = parsed.kind, parsed.target
    if kind == "openai":
        from inference.http_engine import probe_endpoint

        probe_endpoint(target, str(parsed.model), weights=weights, timeout_s=timeout_s)
        return
    from inference.checkpoint import resolve_model

    try:
        path = resolve_model(target)
    except ValueError as exc:
        raise EngineUnavailable(f"engine {spec}: {exc}") from None
    if not (path / "config.json").is_file():
        raise EngineUnavailable(f"engine {spec}: {path} is not a checkpoint directory (no config.json)")
    if kind == "vllm":
        import importlib.util

        import torch

        from inference.vllm_engine import INSTALL_HINT

        if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
            raise EngineUnavailable(f"engine {spec}: {INSTALL_HINT}")


def check_weight_loading(engine: Any, name: str) -> None:
    """An engine object (not a spec) must have the weight-update path asynchronous RL drives."""
    if not callable(getattr(engine, "load_weights", None)):
        raise EngineUnavailable(
            f"engine {name} cannot load new policy weights (no load_weights): its completions would stay at "
            "version 0 and every sample go stale; use hf:DIR, vllm:DIR, or openai:URL#MODEL against gymforge "
            "serve or vllm serve")


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

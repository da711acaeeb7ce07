"""Tool-call validity of a policy on held-out trajectories, teacher-forced: at every trained assistant turn that calls
a tool, the policy gets the conversation so far (greedy decoding) and its first call is scored.

- ``tool_call_format``: the completion holds a parsable ``<tool_call>`` (JSON object with a name);
- ``tool_call_valid``: the right tool (the trajectory's call at that turn) with arguments valid against its offered
  schema (required present, nothing unknown, types and enums respected);
- ``tool_call_exact``: valid and the arguments equal the trajectory's.

The same figures score the base model before SFT and the trained one after (the SFT flow logs both; bench/ measures
them on held-out environments).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FIGURES = ("tool_call_format", "tool_call_valid", "tool_call_exact")


@dataclass(frozen=True)
class CallTurn:
    """One assistant turn to reproduce: the conversation before it, the tools offered, the call it made."""

    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    name: str
    arguments: Mapping[str, Any]


def call_turns(rows: Sequence[Mapping[str, Any]], limit: int) -> list[CallTurn]:
    """Up to ``limit`` trained tool-calling turns of ``rows`` (trajectory records), in row and turn order."""
    turns = []
    for row in rows:
        messages = json.loads(row["messages"]) if isinstance(row["messages"], str) else list(row["messages"])
        tools = json.loads(row["tools"]) if isinstance(row["tools"], str) else list(row["tools"] or [])
        for i, (message, trained) in enumerate(zip(messages, row["train"], strict=True)):
            calls = message.get("tool_calls") or []
            if message["role"] != "assistant" or not trained or not calls or i == 0:
                continue
            fn = calls[0]["function"]
            arguments = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
            turns.append(CallTurn(tuple(messages[:i]), tuple(tools), fn["name"], arguments))
            if len(turns) == limit:
                return turns
    return turns


def argument_problem(arguments: Any, schema: Mapping[str, Any]) -> str | None:
    """What is wrong with ``arguments`` against an OpenAI function schema, or None (jsonschema, additional
    properties refused: an unknown argument is a wrong call whether or not the schema says so)."""
    from jsonschema import Draft202012Validator

    parameters = dict(schema["function"].get("parameters") or {})
    strict = {**parameters, "type": "object", "additionalProperties": False}
    error = next(iter(Draft202012Validator(strict).iter_errors(arguments)), None)
    return None if error is None else error.message


def score_call(text: str, turn: CallTurn) -> dict[str, bool]:
    """The three figures of one completion (see the module docstring)."""
    from inference.tokenizer import parse_tool_calls

    calls = parse_tool_calls(text)
    if not calls:
        return dict.fromkeys(FIGURES, False)
    call = calls[0]
    schemas = {t["function"]["name"]: t for t in turn.tools}
    valid = (call["name"] == turn.name and call["name"] in schemas
             and argument_problem(call["arguments"], schemas[call["name"]]) is None)
    return {"tool_call_format": True, "tool_call_valid": valid,
            "tool_call_exact": valid and call["arguments"] == dict(turn.arguments)}


def score_turns(model: Any, tokenizer: Any, turns: Sequence[CallTurn],
                max_new_tokens: int = 160, batch_size: int = 1) -> list[dict[str, bool]]:
    """The figures of each turn, from its greedy continuation (``greedy_texts``)."""
    texts = greedy_texts(model, tokenizer, turns, max_new_tokens, batch_size)
    return [score_call(text, turn) for text, turn in zip(texts, turns, strict=True)]


def greedy_texts(model: Any, tokenizer: Any, turns: Sequence[CallTurn], max_new_tokens: int,
                 batch_size: int = 1) -> list[str]:
    """What the model writes at each turn: greedy decoding with the in-process engine's loop on the live model, in
    batches of ``batch_size`` prompts of similar length ("" where the prompt fills the context). One at a time is
    the CPU default: there the prompt's prefill dominates a turn and a padded batch takes the masked attention path
    (bench/RESULTS.md: batches of 4-8 ran 0.50x (tiny model) and 1.07x (135M) the turns/s of one at a time); a GPU
    gains from batches."""
    from inference.engine import SamplingParams
    from inference.engine_support import render_prompt
    from inference.hf_engine import HFEngine, Row

    was_training = model.training
    engine = HFEngine(model, tokenizer, max_batch_size=batch_size)
    try:
        prompts = [render_prompt(tokenizer, list(turn.messages), list(turn.tools)) for turn in turns]
        rows = {i: Row(prompt, SamplingParams(temperature=0.0, max_tokens=min(max_new_tokens, room)))
                for i, prompt in enumerate(prompts) if (room := engine.max_positions - len(prompt)) > 0}
        order = sorted(rows, key=lambda i: len(prompts[i]))  # similar lengths: little padding in a batch
        texts = dict(zip(order, (s.text for s in engine.generate_rows([rows[i] for i in order])), strict=True))
    finally:
        model.train(was_training)
    return [texts.get(i, "") for i in range(len(turns))]


def tool_call_validity(model: Any, tokenizer: Any, turns: Sequence[CallTurn],
                       max_new_tokens: int = 160) -> dict[str, float]:
    """The mean of each figure over ``turns``; empty without turns."""
    scores = score_turns(model, tokenizer, turns, max_new_tokens)
    return {name: sum(s[name] for s in scores) / len(scores) for name in FIGURES} if scores else {}

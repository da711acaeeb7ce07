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
BATCH = 8  # held-out turns decoded together (each prompt prefilled apart): bench_sft scoring


@dataclass(frozen=True)
class CallTurn:
    """One assistant turn to reproduce: the conversation before it, the tools offered, the call it made."""

    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    name: str
    arguments: Mapping[str, Any]
    trajectory: str = ""  # the id of the trajectory it comes from: its turns are resampled together


def call_turns(rows: Sequence[Mapping[str, Any]], limit: int) -> list[CallTurn]:
    """Up to ``limit`` trained tool-calling turns of ``rows`` (trajectory records), in row and turn order."""
    turns = []
    for row in rows:
        messages = json.loads(row["messages"]) if isinstance(row["messages"], str) else list(row["messages"])
        tools = json.loads(row["tools"]) if isinstance(row["tools"], str) else list(row["tools"] or [])
        for i, (message, trained) in enumerate(zip(messages, row["train"], strict=True)):
            if len(turns) == limit:
                return turns
            calls = message.get("tool_calls") or []
            if message["role"] != "assistant" or not trained or not calls or i == 0:
                continue
            fn = calls[0]["function"]
            arguments = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
            turns.append(CallTurn(tuple(messages[:i]), tuple(tools), fn["name"], arguments, str(row.get("id", ""))))
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


def score_turns(model: Any, tokenizer: Any, turns: Sequence[CallTurn], max_new_tokens: int = 160,
                batch_size: int = BATCH, **decoding: Any) -> list[dict[str, bool]]:
    """The figures of each turn, from its greedy continuation (``greedy_texts``, with its ``decoding`` options)."""
    texts = greedy_texts(model, tokenizer, turns, max_new_tokens, batch_size, **decoding)
    return [score_call(text, turn) for text, turn in zip(texts, turns, strict=True)]


def greedy_texts(model: Any, tokenizer: Any, turns: Sequence[CallTurn], max_new_tokens: int,
                 batch_size: int = BATCH, first_call: bool = True, prefix_cache: bool = True,
                 dtype: str | None = None) -> list[str]:
    """What the model writes at each turn: greedy decoding with the in-process engine's loop on the live model ("" where
    the prompt fills the context), up to the end of its first call when ``first_call`` (the figures score that one).

    Turns go in their given order, ``batch_size`` at a time: the engine prefills each prompt apart, reusing the
    cache of the one before up to their common prefix (the turns of one conversation prefill only what each adds),
    and decodes the batch together, reading the weights once per step for all of its rows (decoding is bound by
    memory on a CPU). ``prefix_cache`` off pads the batch's prompts and prefills them together, and with
    ``first_call`` off and a batch of one decodes as before both existed (bench_sft scoring measures them).
    ``dtype`` decodes with a plain copy of the model in that dtype (``bfloat16``: half the weight bytes read per
    decoding step, and the bf16 units of a CPU that has them), leaving ``model`` as it is.
    """
    from inference.engine import SamplingParams
    from inference.engine_support import render_prompt
    from inference.hf_engine import HFEngine, Row
    from training.adapters import plain_copy

    was_training = model.training
    decoder = model if dtype is None else plain_copy(model, dtype)
    engine = HFEngine(decoder, tokenizer, max_batch_size=batch_size, prefix_cache=prefix_cache)
    stop = (TOOL_CALL_END,) if first_call else ()
    try:
        prompts = [render_prompt(tokenizer, list(turn.messages), list(turn.tools)) for turn in turns]
        rows = {i: Row(prompt, SamplingParams(temperature=0.0, max_tokens=min(max_new_tokens, room), stop=stop))
                for i, prompt in enumerate(prompts) if (room := engine.max_positions - len(prompt)) > 0}
        samples = dict(zip(rows, engine.generate_rows(list(rows.values())), strict=True))
    finally:
        model.train(was_training)
    return [_with_stop(samples[i], engine.stop_ids) if i in samples else "" for i in range(len(turns))]


TOOL_CALL_END = "</tool_call>"


def _with_stop(sample: Any, stop_ids: frozenset[int]) -> str:
    """The sample's text with the closing tag its stop string cut off put back, so the call parses."""
    cut = sample.finish_reason == "stop" and sample.token_ids[-1] not in stop_ids
    return sample.text + TOOL_CALL_END if cut else sample.text


def mean_figures(scores: Sequence[Mapping[str, bool]]) -> dict[str, float]:
    """The mean of each figure over scored turns; empty without any."""
    return {name: sum(s[name] for s in scores) / len(scores) for name in FIGURES} if scores else {}


def change_interval(before: Sequence[Mapping[str, bool]], after: Sequence[Mapping[str, bool]],
                    turns: Sequence[CallTurn], figure: str = "tool_call_valid", resamples: int = 1000,
                    confidence: float = 0.95, seed: int = 0) -> dict[str, float]:
    """The change of ``figure`` over the same turns scored twice (before and after training), with a percentile
    bootstrap interval that resamples whole trajectories (the turns of one conversation are not independent):
    ``{"change", "change_low", "change_high"}``."""
    import random

    from inference.metrics import percentile_interval

    if not turns:
        raise ValueError("a change over no turns")
    by_trajectory: dict[str, list[float]] = {}
    for old, new, turn in zip(before, after, turns, strict=True):
        by_trajectory.setdefault(turn.trajectory, []).append(float(new[figure]) - float(old[figure]))
    clusters = list(by_trajectory.values())

    def pooled(sample: Sequence[list[float]]) -> float:
        return sum(sum(c) for c in sample) / sum(len(c) for c in sample)

    rng = random.Random(seed)
    draws = [pooled([clusters[rng.randrange(len(clusters))] for _ in clusters]) for _ in range(resamples)]
    low, high = percentile_interval(draws, confidence)
    return {"change": pooled(clusters), "change_low": low, "change_high": high}

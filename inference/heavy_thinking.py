"""Heavy Thinking (LongCat-Flash-Thinking-2601 section 4, "Heavy Thinking Mode: Test-Time Scaling"), a strategy over
any ``Engine``.

- Stage 1, parallel reasoning (width): ``width`` trajectories of the same problem: samples of a prompt, or whole
  tool-use episodes, each in its own environment copy.
- Stage 2, summary (depth): a summary model (the same engine or another: the report allows both) reads every
  trajectory and reasons over them to one final response. The trajectories are shown in an order permuted by
  ``(seed, item, round)``, so position is no shortcut, each exactly once. ``rounds > 1`` is the recursive form: an
  intermediate round draws ``width`` summaries, which become the trajectories the next round reads; the last round
  draws one.
- Context memory for multi-turn use (the report's Figure 11): :class:`HeavyThinkingEngine` wraps an engine so every
  turn of a conversation is heavy: ``width`` candidate responses from the history, then the summary model reads the
  history and the candidates (answer content only, not their reasoning) and writes the turn's response in the same
  format (text or tool calls). Only that response joins the history the next turn sees: the memory carries the
  summaries forward, never the candidates.
- Token accounting of both stages: generated tokens of stage 1 and stage 2 apart (what budgets are matched on), and
  the prompt tokens the summary reads.
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import Field

from data_contracts.stage import Params, seed_for
from inference.context import extractive_summary
from inference.engine import Completion, Engine, Message, Request, SamplingParams
from inference.rollout import Rollout

View = Literal["full", "answer"]

SUMMARY_INSTRUCTION = (
    "Above are {k} independent attempts at the task, in random order. Review them: note where they agree, resolve "
    "where they conflict, look for steps none of them got right, then reason to your own final response. Give it "
    "in the format the task asks for."
)
EPISODE_NOTE = (
    "Before you act: {k} earlier attempts at this task, in random order, each as its tool calls, their results and "
    "its last words. Learn from them, then carry out the task yourself."
)


class HeavyThinkingConfig(Params):
    width: int = Field(4, ge=1, le=64, description="parallel trajectories per problem (stage 1)")
    rounds: int = Field(1, ge=1, le=4, description="summary rounds; above 1 each intermediate round draws `width` "
                                                    "summaries, which the next round reads (recursive depth)")
    view: View = Field("full", description="what the summary reads of a trajectory: full (its text, the tail kept "
                                           "when long) or answer (its \\boxed{} answer or last line)")
    max_chars_per_trajectory: int = Field(1500, gt=0, description="a trajectory's text past this is cut (its "
                                                                  "start dropped: the answer is at the end)")
    summary_max_tokens: int = Field(256, gt=0, description="output budget of a summary")
    summary_temperature: float = Field(0.6, ge=0.0, description="sampling temperature of the summary model")
    seed: int = Field(0, description="seeds the trajectory permutations and the summary's sampling")


def permutation(seed: int, item: str, round_: int, k: int) -> list[int]:
    """The order trajectories are shown in: a permutation of ``range(k)`` fixed by ``(seed, item, round)``."""
    order = list(range(k))
    random.Random(seed_for(seed, "heavy_thinking", item, round_)).shuffle(order)
    return order


def trajectory_text(completion: Completion, view: View, max_chars: int) -> str:
    """What the summary model reads of one stage-1 completion."""
    from envgen.rewards import extract_boxed

    text = completion.text.strip()
    if completion.tool_calls:
        text += "".join(f"\n<tool_call>{json.dumps(_call(c), ensure_ascii=False)}</tool_call>"
                        for c in completion.tool_calls)
    if view == "answer":
        boxed = extract_boxed(completion.text)
        if boxed is not None:
            return f"\\boxed{{{boxed}}}"
        lines = [line for line in text.splitlines() if line.strip()]
        text = lines[-1] if lines else "(no answer)"
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def _call(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function", {})
    arguments = fn.get("arguments", "{}")
    try:
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        pass
    return {"name": fn.get("name"), "arguments": arguments}


def summary_messages(messages: Sequence[Message], texts: Sequence[str], order: Sequence[int]) -> list[Message]:
    """The conversation, then one user message showing ``texts`` in ``order``, each exactly once."""
    if sorted(order) != list(range(len(texts))):
        raise ValueError(f"order {list(order)} is not a permutation of {len(texts)} trajectories")
    blocks = [f"### Attempt {shown + 1}\n{texts[index]}" for shown, index in enumerate(order)]
    note = "\n\n".join([*blocks, SUMMARY_INSTRUCTION.format(k=len(texts))])
    return [*(dict(m) for m in messages), {"role": "user", "content": note}]


@dataclass
class HeavyResult:
    """One problem's Heavy Thinking: the final response and what it cost."""

    final: Completion | None
    """The last round's response; None when the summary prompt did not fit (``overflow``)."""
    rounds: list[list[Completion]]
    """The trajectories each round read: round 0 is stage 1."""
    orders: list[list[int]]
    stage1_tokens: int
    stage2_tokens: int
    summary_prompt_tokens: int
    overflow: bool = False

    @property
    def tokens(self) -> int:
        """Generated tokens of both stages: the budget Heavy Thinking spends."""
        return self.stage1_tokens + self.stage2_tokens


Call = Callable[[Engine, Sequence[Request]], list[list[Completion]]]
"""How an engine call is made: ``engine.generate`` by default; the evaluation passes one that retries outages."""


def direct(engine: Engine, requests: Sequence[Request]) -> list[list[Completion]]:
    return engine.generate(requests)


@dataclass
class HeavyThinking:
    """Heavy Thinking with ``engine`` thinking and ``summary_engine`` (default: the same) summarizing."""

    engine: Engine
    config: HeavyThinkingConfig = field(default_factory=HeavyThinkingConfig)
    summary_engine: Engine | None = None
    call: Call = direct
    fits: Callable[[Request], bool] = lambda request: True
    """Whether a summary request fits the summary model's context (``inference.agent.fits_context``)."""

    def run(self, items: Sequence[tuple[str, Sequence[Message]]], sampling: SamplingParams) -> list[HeavyResult]:
        """Both stages for each ``(item id, messages)``: ``width`` samples, then the summary rounds."""
        requests = [Request(list(m), sampling=replace(sampling, n=self.config.width,
                                                      seed=seed_for(self.config.seed, "stage1", item, 0)))
                    for item, m in items]
        return self.summarize(items, self.call(self.engine, requests))

    def summarize(self, items: Sequence[tuple[str, Sequence[Message]]],
                  trajectories: Sequence[Sequence[Completion]]) -> list[HeavyResult]:
        """Stage 2 over given stage-1 trajectories (an evaluation reuses one set of samples for every width). A
        summary prompt that does not fit the summary model (``fits``) falls back to the answer view; one that
        still does not fit leaves the result without a final response."""
        cfg, summarizer = self.config, self.summary_engine or self.engine
        results = [HeavyResult(None, [list(t)], [], sum(len(c.token_ids) for c in t), 0, 0) for t in trajectories]
        for round_ in range(cfg.rounds):
            last = round_ == cfg.rounds - 1
            pending: list[tuple[HeavyResult, Request]] = []
            for (item, messages), result in zip(items, results, strict=True):
                if result.overflow:
                    continue
                current = result.rounds[-1]
                order = permutation(cfg.seed, item, round_, len(current))
                sampling = SamplingParams(temperature=cfg.summary_temperature, max_tokens=cfg.summary_max_tokens,
                                          n=1 if last else len(current), seed=seed_for(cfg.seed, "summary", item, round_))
                for view in dict.fromkeys((cfg.view, "answer")):
                    texts = [trajectory_text(c, view, cfg.max_chars_per_trajectory) for c in current]
                    request = Request(summary_messages(messages, texts, order), sampling=sampling)
                    if self.fits(request):
                        result.orders.append(order)
                        pending.append((result, request))
                        break
                else:
                    result.overflow = True
            completions = self.call(summarizer, [request for _, request in pending]) if pending else []
            for (result, _), outs in zip(pending, completions, strict=True):
                result.stage2_tokens += sum(len(c.token_ids) for c in outs)
                result.summary_prompt_tokens += len(outs[0].prompt_token_ids)
                if last:
                    result.final = outs[0]
                else:
                    result.rounds.append(list(outs))
        return results


# --- tool-use episodes --------------------------------------------------------------------------------------------


def episode_text(rollout: Rollout, max_chars: int) -> str:
    """An episode as the summary reads it: its tool calls with their results, and its last words."""
    history = [m for m in rollout.messages if m["role"] in ("assistant", "tool")]
    text = extractive_summary(history, max(40, max_chars // 8))
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def episode_note(rollouts: Sequence[Rollout], order: Sequence[int], max_chars: int) -> Message:
    """The user message a summary episode starts with: every earlier episode once, in ``order``."""
    texts = [episode_text(r, max_chars) for r in rollouts]
    blocks = [f"### Attempt {shown + 1} (reward not shown)\n{texts[i]}" for shown, i in enumerate(order)]
    return {"role": "user", "content": "\n\n".join([EPISODE_NOTE.format(k=len(texts)), *blocks])}


@dataclass
class Briefed:
    """An environment whose first observation carries a note (the earlier attempts) after the task's messages; every
    other call goes to the environment itself."""

    env: Any
    note: Message

    async def areset(self, task: Any) -> Any:
        observation = await self.env.areset(task)
        return dataclasses.replace(observation, messages=[*observation.messages, dict(self.note)])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


# --- the multi-turn wrapper ---------------------------------------------------------------------------------------


@dataclass
class TurnUsage:
    stage1_tokens: int = 0
    stage2_tokens: int = 0


class HeavyThinkingEngine:
    """An ``Engine`` whose every response is Heavy Thinking over ``width`` candidate responses (the report's context
    memory for multi-turn use): the conversation a caller keeps holds only the summaries. ``usage`` sums the tokens
    of both stages per request seed (an agent loop seeds each turn), ``total`` over every call."""

    def __init__(self, engine: Engine, config: HeavyThinkingConfig, summary_engine: Engine | None = None) -> None:
        self.engine, self.config, self.summary_engine = engine, config, summary_engine or engine
        self.policy_version = engine.policy_version
        self.usage: dict[int | None, TurnUsage] = {}
        self.total = TurnUsage()
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        cfg = self.config
        stage1 = self.engine.generate([replace(r, sampling=replace(r.sampling, n=cfg.width)) for r in requests])
        summaries = []
        for index, (request, candidates) in enumerate(zip(requests, stage1, strict=True)):
            item = str(request.sampling.seed if request.sampling.seed is not None else index)
            order = permutation(cfg.seed, item, 0, len(candidates))
            texts = [trajectory_text(c, "answer" if request.tools else cfg.view, cfg.max_chars_per_trajectory)
                     for c in candidates]
            summaries.append(Request(summary_messages(request.messages, texts, order), tools=request.tools,
                                     sampling=replace(request.sampling, temperature=cfg.summary_temperature,
                                                      max_tokens=cfg.summary_max_tokens)))
        out = self.summary_engine.generate(summaries)
        with self._lock:
            for request, candidates, finals in zip(requests, stage1, out, strict=True):
                usage = self.usage.setdefault(request.sampling.seed, TurnUsage())
                s1, s2 = sum(len(c.token_ids) for c in candidates), sum(len(c.token_ids) for c in finals)
                usage.stage1_tokens += s1
                usage.stage2_tokens += s2
                self.total.stage1_tokens += s1
                self.total.stage2_tokens += s2
        return out

    def close(self) -> None:
        self.engine.close()
        if self.summary_engine is not self.engine:
            self.summary_engine.close()

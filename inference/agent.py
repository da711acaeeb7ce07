"""The agent loop: rollouts of a policy (any ``Engine``) on QA/KeyChain prompts and in tool environments.

- QA and KeyChain prompts are single-turn: prompt messages -> ``k`` samples -> a reward function of
  ``envgen/rewards.py`` (``reward(completions, **columns) -> list[float]``).
- Tool environments are multi-turn: the completion becomes an assistant message, ``env.step`` answers with tool
  results (or the user), until the episode is done or the turn budget is spent. A malformed tool call (bad JSON,
  unknown tool, missing arguments) is answered with a tool error the agent sees, never an exception.

Episodes run concurrently on asyncio; a lock-step batcher sends one engine call per round holding the pending
requests of every live episode in episode order, so batches — and with seeded sampling, results — are deterministic.
Trajectories are recorded as tokens (``inference/rollout.py``) and context management (``inference/context.py``)
opens a new segment under the same rollout id on each summary or reset.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl
from pydantic import Field

from data_contracts.stage import Params, seed_for
from envgen.environment import ToolEnvironment
from envgen.rewards import BOXED_INSTRUCTION
from inference import context as ctx
from inference.engine import Completion, Engine, Message, Request, SamplingParams
from inference.engine_support import assistant_message
from inference.rollout import Rollout, Segment, Turn

QA_INSTRUCTION = f"Answer the question using the documents. {BOXED_INSTRUCTION}"


class SamplingConfig(Params):
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature (0 = greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    max_tokens: int = Field(64, gt=0, description="output token budget per engine call")

    def params(self, n: int = 1, seed: int | None = None) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.max_tokens, n=n, seed=seed)


class AgentConfig(Params):
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="sampling of every agent turn")
    max_turns: int = Field(8, gt=0, description="agent turns per episode, over all segments (the episode bound)")
    concurrency: int = Field(64, gt=0, description="episodes in flight at once (one engine batch per round)")
    context: ctx.ContextConfig = Field(default_factory=ctx.ContextConfig, description="context management")
    seed: int = Field(0, description="seeds every request's sampling")


# ---------------------------------------------------------------------------------------------------------------
# Prompts and messages


def qa_prompt(question: str, docs: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The QA prompt: the documents, then the question; the answer goes in \\boxed{} (LoongRL, section 3.2.1)."""
    blocks = [f"Document {i + 1}: {d['title']}\n{d['text']}" for i, d in enumerate(docs)]
    return [{"role": "user", "content": "\n\n".join([*blocks, f"Question: {question}\n{QA_INSTRUCTION}"])}]


_TOOL_CALL_TAG = re.compile(r"<tool_call>")


def tool_call_errors(message: Message, tools: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Tool messages answering every malformed call of ``message``; empty when all calls are well formed.

    Checks: the call's JSON parsed (a ``<tool_call>`` tag in the text that did not become a call), the tool exists,
    the arguments are a JSON object holding every required parameter."""
    schemas = {t["function"]["name"]: t["function"] for t in tools if t.get("type", "function") == "function"}
    calls = message.get("tool_calls") or []
    problems = [_call_problem(c.get("function", {}).get("name"), c.get("function", {}).get("arguments"), schemas)
                for c in calls]
    errors: list[Message] = []
    if any(problems):  # every call id gets an answer; the well-formed ones are not run either
        errors = [
            {"role": "tool", "tool_call_id": call.get("id", ""),
             "content": f"Error: {problem}" if problem else "Error: not run, another call of this turn is malformed"}
            for call, problem in zip(calls, problems, strict=True)
        ]
    # Engines keep the raw text of a completion whose tool-call markup did not parse (inference/engine_support.py).
    if len(_TOOL_CALL_TAG.findall(str(message.get("content") or ""))) > len(calls):
        errors.append({
            "role": "tool", "tool_call_id": "",
            "content": 'Error: a <tool_call> block is not valid JSON; write <tool_call>{"name": <function-name>, '
                       '"arguments": <args-json-object>}</tool_call>',
        })
    return errors


def _call_problem(name: Any, arguments: Any, schemas: Mapping[str, Mapping[str, Any]]) -> str | None:
    if name not in schemas:
        return f"unknown tool {name!r}; available tools: {', '.join(sorted(schemas)) or '(none)'}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return f"arguments of {name} are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(arguments, dict):
        return f"arguments of {name} must be a JSON object, got {type(arguments).__name__}"
    required = schemas[name].get("parameters", {}).get("required", [])
    missing = [arg for arg in required if arg not in arguments]
    if missing:
        return f"{name} is missing required argument(s): {', '.join(missing)}"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Batching


class Batcher(Protocol):
    """Sends an episode's engine requests: ``generate(episode_index, request)``; ``leave()`` when the
    episode ends; ``engine`` is the engine behind it."""

    engine: Engine

    async def generate(self, episode: int, request: Request) -> list[Completion]: ...

    def leave(self) -> None: ...


class LockstepBatcher:
    """Collects one request per live episode and sends them as one engine batch, in episode order.

    The engine runs in a worker thread so the event loop (and async environments) stay responsive."""

    def __init__(self, engine: Engine, live: int) -> None:
        self.engine = engine
        self.live = live
        self._pending: list[tuple[int, Request, asyncio.Future[list[Completion]]]] = []

    async def generate(self, episode: int, request: Request) -> list[Completion]:
        future: asyncio.Future[list[Completion]] = asyncio.get_running_loop().create_future()
        self._pending.append((episode, request, future))
        self._maybe_flush()
        return await future

    def leave(self) -> None:
        self.live -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if not self._pending or len(self._pending) < self.live:
            return
        batch, self._pending = sorted(self._pending, key=lambda item: item[0]), []
        asyncio.get_running_loop().create_task(self._run(batch))

    async def _run(self, batch: list[tuple[int, Request, asyncio.Future[list[Completion]]]]) -> None:
        try:
            results = await asyncio.to_thread(self.engine.generate, [request for _, request, _ in batch])
        except Exception as exc:  # noqa: BLE001  (re-raised in every waiting episode)
            for *_, future in batch:
                future.set_exception(exc)
            return
        for (*_, future), completions in zip(batch, results, strict=True):
            future.set_result(completions)


class ContinuousBatcher:
    """Sends every pending request as one engine batch as soon as the engine is free: no episode waits for another's
    turn, so rollouts stream (asynchronous RL). ``max_calls`` engine calls may be in flight at once: 1 for an
    in-process engine (one batch at a time), more for a server that batches itself (``openai:``), so each request
    returns when it is done instead of with the slowest of a batch. ``before_batch`` runs before each engine call on
    the engine's thread (a policy-weight refresh); ``timeout_s`` bounds one engine call."""

    def __init__(self, engine: Engine, max_batch: int = 16, before_batch: Callable[[], None] | None = None,
                 timeout_s: float | None = None, max_calls: int = 1) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.engine = engine
        self.max_batch = max_batch
        self.max_calls = max_calls
        self.before_batch = before_batch or (lambda: None)
        self.timeout_s = timeout_s
        self.busy_s = 0.0  # time with at least one engine call in flight, for the request load ratio
        self._pending: list[tuple[Request, asyncio.Future[list[Completion]]]] = []
        self._running = 0
        self._calls = 0  # engine calls in progress, on the executor's threads
        self._busy_since = 0.0
        self._busy_lock = threading.Lock()
        # Overlapping calls get threads of their own, so they never starve the loop's default executor.
        self._executor = ThreadPoolExecutor(max_workers=max_calls, thread_name_prefix="engine-call") \
            if max_calls > 1 else None

    async def generate(self, episode: int, request: Request) -> list[Completion]:
        future: asyncio.Future[list[Completion]] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._kick()
        return await future

    def leave(self) -> None:
        return None

    def _kick(self) -> None:
        while self._running < self.max_calls and self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            self._running += 1
            asyncio.get_running_loop().create_task(self._run(batch))

    def _call(self, requests: list[Request]) -> list[list[Completion]]:
        self.before_batch()
        with self._busy_lock:
            if not self._calls:
                self._busy_since = time.perf_counter()
            self._calls += 1
        try:
            return self.engine.generate(requests)
        finally:
            with self._busy_lock:
                self._calls -= 1
                if not self._calls:
                    self.busy_s += time.perf_counter() - self._busy_since

    async def _run(self, batch: list[tuple[Request, asyncio.Future[list[Completion]]]]) -> None:
        try:
            call = asyncio.get_running_loop().run_in_executor(self._executor, self._call,
                                                              [request for request, _ in batch])
            results = await (asyncio.wait_for(call, self.timeout_s) if self.timeout_s else call)
        except Exception as exc:  # noqa: BLE001  (re-raised in every waiting episode)
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        else:
            for (_, future), completions in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(completions)
        finally:
            self._running -= 1
            self._kick()


# ---------------------------------------------------------------------------------------------------------------
# Single-turn rollouts (QA, KeyChain)

RewardFn = Callable[..., list[float]]


@dataclass(frozen=True)
class PromptItem:
    """One prompt to sample ``k`` times; ``columns`` are passed to the reward function (answer, aliases, ...)."""

    id: str
    messages: Sequence[Message]
    columns: Mapping[str, Any]


QA_PROMPT_TOKENS = 512
"""Default size of a QA seed prompt's documents, in tokens (~4 characters each): short enough for the tiny policy."""


def qa_prompt_items(seeds: pl.DataFrame, max_prompt_tokens: int) -> list[PromptItem]:
    """One prompt per QA seed (the difficulty filter's and the tiny policy's): the question and its documents,
    supporting ones first, kept short."""
    items = []
    for row in seeds.iter_rows(named=True):
        items.append(PromptItem(
            id=str(row["id"]),
            messages=qa_prompt(row["question"], prompt_docs(row["docs"], max_prompt_tokens * 4)),
            columns={"answer": row["answer"], "aliases": _aliases(row.get("aliases"))},
        ))
    return items


def prompt_docs(docs_json: str, max_chars: int) -> list[dict[str, str]]:
    """The documents for a short prompt: supporting ones first, texts cut to fit ``max_chars`` in total."""
    docs = sorted(json.loads(docs_json), key=lambda d: not d.get("is_supporting", False))
    kept, budget = [], max_chars
    for doc in docs:
        if budget <= 0:
            break
        text = str(doc["text"])[:budget]
        kept.append({"title": str(doc["title"]), "text": text})
        budget -= len(text) + len(str(doc["title"]))
    return kept


def _aliases(value: Any) -> list[str]:
    if value is None:
        return []
    return json.loads(value) if isinstance(value, str) else list(value)



def rollout_prompts(engine: Engine, items: Sequence[PromptItem], k: int, reward_fn: RewardFn,
                    config: AgentConfig, source: str, batch_size: int = 64) -> list[list[Rollout]]:
    """``k`` samples of every item (one request with ``n = k``, batched ``batch_size`` items per engine call);
    one group of rollouts per item, in item order."""
    if k < 1:
        raise ValueError(f"k={k}: the number of samples per item must be at least 1")
    groups: list[list[Rollout]] = []
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        requests = [
            Request(messages=list(item.messages),
                    sampling=config.sampling.params(n=k, seed=seed_for(config.seed, source, item.id, 0)))
            for item in chunk
        ]
        for item, completions in zip(chunk, engine.generate(requests), strict=True):
            if len(completions) != k:
                raise RuntimeError(f"engine returned {len(completions)} samples for item {item.id}, expected {k}")
            columns = {name: [value] * k for name, value in item.columns.items()}
            rewards = reward_fn([[assistant_message(c)] for c in completions], **columns)
            groups.append([
                single_turn_rollout(item, index, completion, reward, source)
                for index, (completion, reward) in enumerate(zip(completions, rewards, strict=True))
            ])
    return groups


def rollout_mix(engine: Engine, frame: Any, k: int, config: AgentConfig, source: str = "mix",
                batch_size: int = 64, reward: str | None = None) -> list[list[Rollout]]:
    """``k`` samples of every row of a prompt frame (``rl_mix`` / ``keychain`` columns: id, prompt as JSON chat
    messages, answer, aliases), scored by the reward its ``reward_fn`` column names, or by ``reward`` for a frame
    without that column (a ``keychain`` output: ``two_way``); one group per row, in row order. A row naming no
    reward is an error, never a silent default."""
    from envgen.rewards import get_reward

    rows = list(frame.iter_rows(named=True))
    if "reward_fn" not in frame.columns and reward is None:
        raise ValueError("the frame has no reward_fn column: name the reward of its rows (reward='two_way')")
    by_reward: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        name = row["reward_fn"] if "reward_fn" in frame.columns else reward
        if not name:
            raise ValueError(f"row {row['id']!r} names no reward in its reward_fn column")
        by_reward.setdefault(name, []).append(i)
    groups: list[list[Rollout]] = [[] for _ in rows]
    for name, indices in by_reward.items():
        items = [
            PromptItem(id=str(rows[i]["id"]), messages=_messages(rows[i]["prompt"]),
                       columns={"answer": rows[i]["answer"], "aliases": list(rows[i].get("aliases") or [])})
            for i in indices
        ]
        for i, group in zip(indices, rollout_prompts(engine, items, k, get_reward(name), config, source, batch_size),
                            strict=True):
            groups[i] = group
    return groups


def _messages(prompt: Any) -> list[Message]:
    messages = json.loads(prompt) if isinstance(prompt, str) else list(prompt)
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ValueError("a prompt must be a JSON list of chat messages with a 'role' each")
    return messages


def single_turn_rollout(item: PromptItem, index: int, completion: Completion, reward: float | None,
                            source: str) -> Rollout:
    value = float(reward or 0.0)
    # A pass is full credit; partial-credit rewards (token F1, needle recall) do not count as solved.
    return Rollout(
        id=f"{item.id}#{index}", group_id=item.id, source=source, item_id=item.id,
        messages=[*item.messages, assistant_message(completion)],
        segments=[Segment("initial", [Turn.from_completion(completion)])],
        reward=value, reward_components={"answer": value}, verified=value >= 1.0,
        failure=None if value >= 1.0 else "agent", sample_index=index,
        stop_reason="length" if completion.finish_reason == "length" else "done",
    )


# ---------------------------------------------------------------------------------------------------------------
# Multi-turn rollouts in tool environments


@dataclass(frozen=True)
class Episode:
    """One rollout to run: a fresh environment (its own database copy) and the task to reset it with."""

    id: str
    group_id: str
    make_env: Callable[[], ToolEnvironment]
    task: Any
    env_id: str | None = None
    task_id: str | None = None
    sample_index: int = 0


def run_episodes(engine: Engine, episodes: Sequence[Episode], config: AgentConfig,
                 source: str = "env") -> list[Rollout]:
    """Run every episode to completion (or its turn budget), ``config.concurrency`` at a time, in episode order."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_episodes(engine, episodes, config, source))
    # Called from inside an event loop (a notebook, an async task): run the episodes' own loop on a private thread.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, arun_episodes(engine, episodes, config, source)).result()


async def arun_episodes(engine: Engine, episodes: Sequence[Episode], config: AgentConfig,
                        source: str = "env") -> list[Rollout]:
    results: list[Rollout] = []
    for start in range(0, len(episodes), config.concurrency):
        wave = episodes[start:start + config.concurrency]
        batcher = LockstepBatcher(engine, live=len(wave))
        results += await asyncio.gather(*(play_episode(batcher, i, ep, config, source) for i, ep in enumerate(wave)))
    return results


async def play_episode(batcher: Batcher, index: int, episode: Episode, config: AgentConfig,
                   source: str) -> Rollout:
    env = None
    try:
        env = episode.make_env()
        return await _play(env, batcher, index, episode, config, source)
    finally:
        if env is not None:
            env.close()
        batcher.leave()


async def _play(env: ToolEnvironment, batcher: Batcher, index: int, episode: Episode, config: AgentConfig,
                source: str) -> Rollout:
    observation = await env.areset(episode.task)
    initial = [dict(m) for m in observation.messages]
    tools = list(observation.tools)
    context, transcript = [dict(m) for m in initial], [dict(m) for m in initial]
    segments = [Segment("initial")]
    reward, done, info, stop = 0.0, False, {}, "max_turns"
    for turn in range(config.max_turns):
        seed = seed_for(config.seed, source, episode.id, turn)
        action = ctx.decide(config.context, segments)
        if action != "keep":
            summary = None
            if action == "summarize":
                summary = await _summarize(batcher, index, context, tools, segments[-1], config, seed)
            context = ctx.restart_context(initial, summary)
            segments.append(Segment("summary" if summary is not None else "reset"))
        request = Request(messages=list(context), tools=tools, sampling=config.sampling.params(seed=seed))
        if not fits_context(batcher.engine, request):
            stop = "context_overflow"
            break
        [completion] = await batcher.generate(index, request)
        segments[-1].turns.append(Turn.from_completion(completion))
        message = assistant_message(completion)
        context.append(message)
        transcript.append(message)
        errors = tool_call_errors(message, tools)
        if errors:
            new_messages = errors
        else:
            observation, reward, done, info = await env.astep(message)
            new_messages = [dict(m) for m in observation.messages]
        context += new_messages
        transcript += new_messages
        if done:
            stop = "done"
            break
    if not done:  # cut off: score the end state as it stands
        scored = env.score()
        reward, info = scored.reward, scored.info
    components = dict(info.get("reward_components") or {"reward": float(reward)})
    return Rollout(
        id=episode.id, group_id=episode.group_id, source=source, item_id=episode.task_id or episode.id,
        messages=transcript, segments=segments, reward=float(reward), reward_components=components,
        verified=reward >= 1.0, failure=None if reward >= 1.0 else (info.get("failure") or "agent"),
        env_id=episode.env_id, task_id=episode.task_id, sample_index=episode.sample_index, stop_reason=stop,
    )


def fits_context(engine: Engine, request: Request) -> bool:
    """Whether the prompt plus its output budget fits the engine's context window. Only engines that expose
    ``render`` and ``max_positions`` (the in-process transformers engine) can tell; a server reports overflows as
    request errors instead."""
    render, limit = getattr(engine, "render", None), getattr(engine, "max_positions", None)
    if render is None or limit is None:
        return True
    return len(render(request)) + request.sampling.max_tokens <= limit


async def _summarize(batcher: Batcher, index: int, context: list[Message], tools: list[dict],
                     segment: Segment, config: AgentConfig, seed: int) -> str:
    """The summary for the next segment; an engine-written one is recorded as a summary turn of this segment."""
    request = ctx.summary_request(context, tools, config.sampling.params(seed=seed), config.context)
    if config.context.summarizer == "extractive" or not fits_context(batcher.engine, request):
        return ctx.extractive_summary(context, config.context.extractive_chars_per_result)
    [completion] = await batcher.generate(index, request)
    segment.turns.append(Turn.from_completion(completion, kind="summary"))
    return completion.text

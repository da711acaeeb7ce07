"""Running a suite's items through an engine: one set of samples per item, every strategy computed from it.

Per item, ``samples`` trajectories are drawn once (stage 1: prompt samples in one request with ``n``, or whole
episodes, each in its own environment copy); for every width ``k`` the strategies read the first ``k`` of them:
single sample, self-consistency (majority vote), best-of-k with the verifier (the oracle upper bound) and Heavy
Thinking (the summary model over those ``k``). The samples being i.i.d., the first ``k`` are a fair draw, and the
strategies are compared on the same trajectories. Tokens are counted per result (every sample it used plus the
summaries), so strategies can be matched on budget.

Infrastructure: an engine retries its own transient failures (the HTTP engine: connection errors, timeouts and
408/429/5xx with a bounded exponential backoff, its ``max_retries`` and ``backoff_s`` options); what still fails is
an infrastructure error (``is_infrastructure``) recorded apart (status ``infra_error``), never a wrong answer. Results are appended to a checkpoint file as each batch
finishes, so a run killed or stopped by an outage resumes where it stopped.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from data_contracts.stage import Params, seed_for
from inference.agent import AgentConfig, Episode, SamplingConfig, fits_context, run_episodes
from inference.context import ContextConfig
from inference.engine import Completion, Engine, Request
from inference.engine_support import assistant_message
from inference.evaluation.items import EvalItem
from inference.heavy_thinking import (
    Briefed,
    HeavyResult,
    HeavyThinking,
    HeavyThinkingConfig,
    episode_note,
    permutation,
)
from inference.metrics import majority_vote
from inference.rollout import Rollout

StrategyName = Literal["single", "self_consistency", "best_of_k", "heavy_thinking", "context"]
SAMPLE = "sample"

DEFAULT_CONTEXTS = {
    "none": ContextConfig(strategy="none"),
    "summary_40k": ContextConfig(strategy="summary", summary_threshold_tokens=40_000),
    "summary_80k": ContextConfig(strategy="summary", summary_threshold_tokens=80_000),
    "discard": ContextConfig(strategy="discard"),
    "hybrid": ContextConfig(strategy="hybrid"),
}
"""The ablation of the report's Figure 7 / Appendix B: summary at thresholds (80K its optimum), discard-all, hybrid."""


class EvalConfig(Params):
    strategies: tuple[StrategyName, ...] | None = Field(
        None, description="strategies beside the plain samples (Avg@k, Pass@k); None: the suite's own")
    ks: tuple[int, ...] = Field((1, 2, 4, 8, 16), description="widths the strategies are measured at (the budget "
                                                              "curve's points)")
    samples: int | None = Field(None, ge=1, description="samples per item (stage 1); None: the largest k")
    sampling: SamplingConfig = Field(default_factory=lambda: SamplingConfig(max_tokens=256),
                                     description="sampling of every trajectory")
    max_turns: int = Field(8, gt=0, description="agent turns per episode")
    concurrency: int = Field(16, gt=0, description="episodes in flight at once (one engine batch per round)")
    batch_size: int = Field(16, gt=0, description="prompt items per engine call (each with n samples)")
    heavy: HeavyThinkingConfig = Field(default_factory=HeavyThinkingConfig,
                                       description="Heavy Thinking (its width is each k in turn)")
    contexts: dict[str, ContextConfig] = Field(default_factory=lambda: dict(DEFAULT_CONTEXTS),
                                               description="context strategies of the context ablation, by name")
    small_tools: int | None = Field(None, ge=0, description="offer an environment's task tools plus this many "
                                                            "distractors with compact schemas (short-context "
                                                            "models); None: every tool, full schemas")
    max_items: int | None = Field(None, gt=0, description="evaluate at most this many items (runs interleaved)")
    seed: int = Field(0, description="seeds every sample")
    max_infra_error_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="publish with up to this share of items left unscored by engine outages "
        "(recorded as infra_error); above it the run stops and resumes on the next try")

    @model_validator(mode="after")
    def _widths(self) -> EvalConfig:
        if not self.ks or any(k < 1 for k in self.ks) or list(self.ks) != sorted(set(self.ks)):
            raise ValueError(f"ks={list(self.ks)}: give distinct widths >= 1 in ascending order")
        if self.samples is not None and self.samples < max(self.ks):
            raise ValueError(f"samples={self.samples} is below the largest width {max(self.ks)}: each width reads "
                             "that many samples")
        return self

    @property
    def n_samples(self) -> int:
        return self.samples or max(self.ks)


# --- infrastructure errors ----------------------------------------------------------------------------------------


_STATUS = re.compile(r"HTTP (\d{3})")


def is_infrastructure(exc: BaseException) -> bool:
    """Connection errors, timeouts and 408/429/5xx answers: the endpoint's fault, not the model's. A 4xx (a prompt
    the server refuses) or a malformed response is not retried: it would fail the same way again."""
    import httpx

    from inference.http_engine import RETRY_STATUS, EngineError

    if isinstance(exc, OSError | TimeoutError | httpx.TransportError | httpx.TimeoutException):
        return True
    if isinstance(exc, EngineError):
        status = _STATUS.search(str(exc))
        if status:
            return int(status.group(1)) in RETRY_STATUS
        return bool(re.search(r": [A-Za-z]\w* after \d+ attempts", str(exc)))  # the HTTP engine's transport errors
    return False


# --- checkpoint -----------------------------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """Results of finished items, one JSON line per item, appended as they finish; None: keep nothing."""

    directory: Path | None

    @property
    def path(self) -> Path | None:
        return self.directory / "items.jsonl" if self.directory else None

    def load(self) -> dict[str, list[dict[str, Any]]]:
        done: dict[str, list[dict[str, Any]]] = {}
        if self.path is None or not self.path.is_file():
            return done
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # the last line of a run killed while writing it
                continue
            done[entry["item"]] = entry["rows"]
        return done

    def add(self, results: Mapping[str, list[dict[str, Any]]]) -> None:
        if self.path is None or not results:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            for item, rows in results.items():
                fh.write(json.dumps({"item": item, "rows": rows}, ensure_ascii=False) + "\n")
            fh.flush()


# --- results ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One stage-1 trajectory reduced to what the strategies read."""

    score: float
    tokens: int
    answer: str | None
    scored: bool = True
    failure: str | None = None
    stop: str = "done"

    @property
    def correct(self) -> bool:
        return self.score >= 1.0


@dataclass
class Context:
    """What every row of one run shares."""

    suite: str
    variant: str
    config: EvalConfig
    overlap: frozenset[str] = frozenset()
    strategies: tuple[str, ...] = ()


def base_row(item: EvalItem, ctx: Context) -> dict[str, Any]:
    a = item.attributes
    return {"suite": ctx.suite, "variant": ctx.variant, "item_id": item.id, "source": item.source,
            "domain": a.get("domain"), "difficulty": a.get("difficulty"), "length": a.get("length"),
            "noise_level": a.get("noise_level"), "noise_types": list(a.get("noise_types") or []),
            "clean_task_id": a.get("clean_task_id"), "run": a.get("run"), "summary_prompt_tokens": 0,
            "answer": None, "status": "scored", "error": None, "overlap": bool(ctx.overlap & set(item.known_as))}


def result_row(base: Mapping[str, Any], strategy: str, k: int, samples: Sequence[Attempt], score: float | None,
               tokens: int, **extra: Any) -> dict[str, Any]:
    scored = [s for s in samples if s.scored]
    return {**base, "strategy": strategy, "k": k, "score": score, "n_samples": len(scored),
            "n_correct": sum(s.correct for s in scored), "tokens": tokens,
            "failures": json.dumps(dict(Counter(s.failure for s in samples if s.failure)), sort_keys=True),
            "stop_reasons": json.dumps(dict(Counter(s.stop for s in samples)), sort_keys=True), **extra}


def infra_row(item: EvalItem, ctx: Context, error: str) -> dict[str, Any]:
    return {**base_row(item, ctx), "strategy": SAMPLE, "k": ctx.config.n_samples, "score": None, "n_samples": 0,
            "n_correct": 0, "tokens": 0, "failures": "{}", "stop_reasons": "{}", "status": "infra_error",
            "error": error}


def strategy_rows(base: Mapping[str, Any], samples: Sequence[Attempt], ctx: Context,
                  vote_key: Callable[[int], Any]) -> list[dict[str, Any]]:
    """The sample row (Avg@n) and single / self-consistency / best-of-k rows at each width, from the samples."""
    scored = [s for s in samples if s.scored]
    rows = [result_row(base, SAMPLE, len(samples), samples,
                       sum(s.score for s in scored) / len(scored) if scored else None, sum(s.tokens for s in samples))]
    for k in ctx.config.ks:
        first = samples[:k]
        usable = [i for i, s in enumerate(first) if s.scored]
        tokens = sum(s.tokens for s in first)
        if not usable:
            continue
        if k == 1 and "single" in ctx.strategies:
            rows.append(result_row(base, "single", 1, first, first[usable[0]].score, tokens,
                                   answer=first[usable[0]].answer))
        if "best_of_k" in ctx.strategies:
            rows.append(result_row(base, "best_of_k", k, first, float(any(first[i].correct for i in usable)), tokens))
        if "self_consistency" in ctx.strategies:
            keys = [vote_key(i) if i in usable else None for i in range(len(first))]
            winner, _ = majority_vote(keys)
            chosen = next((i for i in usable if keys[i] == winner), usable[0]) if winner is not None else None
            rows.append(result_row(base, "self_consistency", k, first,
                                   first[chosen].score if chosen is not None else 0.0, tokens,
                                   answer=first[chosen].answer if chosen is not None else None))
    return rows


# --- prompts --------------------------------------------------------------------------------------------------------


def _reward(item: EvalItem, completions: Sequence[Completion]) -> list[float]:
    from envgen.rewards import get_reward

    n = len(completions)
    return [float(r or 0.0) for r in get_reward(item.reward or "two_way")(
        [[assistant_message(c)] for c in completions], answer=[item.answer] * n, aliases=[list(item.aliases)] * n)]


def _answer(completion: Completion) -> str | None:
    from envgen.rewards import extract_boxed, normalize

    boxed = extract_boxed(completion.text)
    return normalize(boxed) if boxed is not None else None


def _prompt_samples(item: EvalItem, completions: Sequence[Completion]) -> list[Attempt]:
    return [Attempt(score, len(c.token_ids), _answer(c), stop="length" if c.finish_reason == "length" else "done")
            for c, score in zip(completions, _reward(item, completions), strict=True)]


def run_prompts(engine: Engine, summary_engine: Engine, items: Sequence[EvalItem], ctx: Context
                ) -> dict[str, list[dict[str, Any]]]:
    """Every row of one batch of prompt items."""
    cfg = ctx.config
    n = cfg.n_samples
    requests = {item.id: Request(list(item.messages), sampling=cfg.sampling.params(
        n=n, seed=seed_for(cfg.seed, "evaluate", item.id, 0))) for item in items}
    fitting = [item for item in items if fits_context(engine, requests[item.id])]
    completions = dict(zip([i.id for i in fitting], engine.generate([requests[i.id] for i in fitting]) if fitting
                           else [], strict=True))
    out: dict[str, list[dict[str, Any]]] = {}
    samples: dict[str, list[Attempt]] = {}
    for item in items:
        base = base_row(item, ctx)
        if item.id not in completions:  # the prompt does not fit the model's context: every sample fails
            samples[item.id] = [Attempt(0.0, 0, None, stop="context_overflow")] * n
        else:
            samples[item.id] = _prompt_samples(item, completions[item.id])
        out[item.id] = strategy_rows(base, samples[item.id], ctx, lambda i, s=samples[item.id]: s[i].answer)
    if "heavy_thinking" in ctx.strategies:  # an overflowing item scores 0 here too: every strategy, the same items
        for item in (i for i in items if i.id not in completions):
            out[item.id] += [result_row(base_row(item, ctx), "heavy_thinking", k, samples[item.id][:k], 0.0, 0)
                             for k in cfg.ks]
    if "heavy_thinking" in ctx.strategies and fitting:
        heavy = HeavyThinking(engine, cfg.heavy, summary_engine, fits=partial(fits_context, summary_engine))
        keyed = [(item.id, list(item.messages)) for item in fitting]
        for k in cfg.ks:
            results = heavy.summarize(keyed, [completions[item.id][:k] for item in fitting])
            for item, result in zip(fitting, results, strict=True):
                out[item.id].append(_heavy_row(base_row(item, ctx), item, k, samples[item.id][:k], result))
    return out


def _heavy_row(base: Mapping[str, Any], item: EvalItem, k: int, first: Sequence[Attempt], result: HeavyResult
               ) -> dict[str, Any]:
    if result.final is None:  # not even the answers fit the summary model's context
        return result_row(base, "heavy_thinking", k, first, 0.0, result.tokens, summary_prompt_tokens=0)
    [score] = _reward(item, [result.final])
    return result_row(base, "heavy_thinking", k, first, score, result.tokens, answer=_answer(result.final),
                      summary_prompt_tokens=result.summary_prompt_tokens)


# --- episodes -------------------------------------------------------------------------------------------------------


def environment_factory(item: EvalItem, small_tools: int | None) -> Callable[[], Any]:
    """A fresh environment (its own database copy) with the task's noise schedule; restricted to the task's tools
    and ``small_tools`` distractors with compact schemas when set (``envgen.small.task_view``: the view training
    and RL give the same task)."""
    from envgen.noise.environment import NoisyEnvironment
    from envgen.small import task_view

    env = dict(item.env or {})
    if small_tools is not None:
        env = task_view(env, dict(item.task or {}), small_tools)
    return partial(NoisyEnvironment, env)


def _episode_sample(rollout: Rollout) -> Attempt:
    tokens = sum(len(t.output_ids) for t in rollout.turns())
    # Tool and user-simulator failures are not the agent's (DESIGN.md section 7): left out of its score.
    return Attempt(float(rollout.reward), tokens, None, scored=rollout.failure not in ("tool", "user"),
                  failure=rollout.failure, stop=rollout.stop_reason)


def _actions(rollout: Rollout) -> str:
    """What an episode did, for self-consistency's vote: its tool calls in order."""
    calls = [(c["function"]["name"], c["function"].get("arguments")) for m in rollout.messages
             if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    return json.dumps(calls, sort_keys=True)


def _agent(cfg: EvalConfig, context: ContextConfig | None = None, seed_tag: str = "") -> AgentConfig:
    return AgentConfig(sampling=cfg.sampling, max_turns=cfg.max_turns, concurrency=cfg.concurrency,
                       context=context or ContextConfig(), seed=seed_for(cfg.seed, "evaluate/agent", seed_tag, 0))


def _episodes(items: Sequence[EvalItem], ctx: Context, n: int, tag: str,
              brief: Callable[[EvalItem, int], Any] | None = None) -> list[Episode]:
    episodes = []
    for item in items:
        make = environment_factory(item, ctx.config.small_tools)
        for s in range(n):
            factory = make if brief is None else partial(Briefed, make(), brief(item, s))
            episodes.append(Episode(id=f"{item.id}#{tag}{s}", group_id=item.id, make_env=factory,
                                    task=dict(item.task or {}), env_id=(item.env or {}).get("env_id"),
                                    task_id=item.id, sample_index=s))
    return episodes


def _grouped(rollouts: Sequence[Rollout], items: Sequence[EvalItem], n: int) -> Iterator[list[Rollout]]:
    for i in range(len(items)):
        yield list(rollouts[i * n:(i + 1) * n])


def run_envs(engine: Engine, summary_engine: Engine, items: Sequence[EvalItem], ctx: Context
             ) -> dict[str, list[dict[str, Any]]]:
    """Every row of one batch of environment tasks."""
    cfg = ctx.config
    n = cfg.n_samples
    out: dict[str, list[dict[str, Any]]] = {}
    by_item: dict[str, list[Rollout]] = {}
    if ctx.strategies != ("context",):  # the plain samples (Avg@k, Pass@k, gaps), unless only the ablation runs
        rollouts = run_episodes(engine, _episodes(items, ctx, n, ""), _agent(cfg), ctx.suite)
        for item, group in zip(items, _grouped(rollouts, items, n), strict=True):
            by_item[item.id] = group
            samples = [_episode_sample(r) for r in group]
            out[item.id] = strategy_rows(base_row(item, ctx), samples, ctx, lambda i, g=group: _actions(g[i]))
        if "heavy_thinking" in ctx.strategies:
            for k in cfg.ks:
                for item, row in zip(items, _heavy_episodes(summary_engine, items, by_item, k, ctx), strict=True):
                    out[item.id].append(row)
    else:
        out = {item.id: [] for item in items}
    if "context" in ctx.strategies:
        for name, context in cfg.contexts.items():
            rollouts = run_episodes(engine, _episodes(items, ctx, n, f"{name}/"), _agent(cfg, context, name),
                                    ctx.suite)
            for item, group in zip(items, _grouped(rollouts, items, n), strict=True):
                samples = [_episode_sample(r) for r in group]
                scored = [s for s in samples if s.scored]
                out[item.id].append(result_row(base_row(item, ctx), f"context:{name}", n, samples,
                                               sum(s.score for s in scored) / len(scored) if scored else None,
                                               sum(s.tokens for s in samples)))
    return out


def _heavy_episodes(summary_engine: Engine, items: Sequence[EvalItem], by_item: Mapping[str, list[Rollout]], k: int,
                    ctx: Context) -> list[dict[str, Any]]:
    """Heavy Thinking over episodes: the summary model plays the task once more in a fresh environment copy, its
    first observation carrying the first ``k`` episodes (tool calls, results, last words) in a permuted order;
    intermediate rounds play ``k`` such episodes, which the next round reads."""
    cfg = ctx.config.heavy
    current = {item.id: by_item[item.id][:k] for item in items}
    tokens = {item.id: sum(_episode_sample(r).tokens for r in current[item.id]) for item in items}
    for round_ in range(cfg.rounds):
        width = 1 if round_ == cfg.rounds - 1 else k

        def brief(item: EvalItem, s: int, r: int = round_) -> Any:
            order = permutation(cfg.seed, f"{item.id}/{s}", r, len(current[item.id]))
            return episode_note(current[item.id], order, cfg.max_chars_per_trajectory)

        rollouts = run_episodes(summary_engine, _episodes(items, ctx, width, f"heavy{k}.{round_}/", brief),
                                _agent(ctx.config, seed_tag=f"heavy{k}.{round_}"), ctx.suite)
        for item, group in zip(items, _grouped(rollouts, items, width), strict=True):
            current[item.id] = group
            tokens[item.id] += sum(_episode_sample(r).tokens for r in group)
    rows = []
    for item in items:
        final = _episode_sample(current[item.id][0])
        first = [_episode_sample(r) for r in by_item[item.id][:k]]
        rows.append(result_row(base_row(item, ctx), "heavy_thinking", k, first,
                               final.score if final.scored else None, tokens[item.id]))
    return rows


# --- the whole run --------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    rows: list[dict[str, Any]] = field(default_factory=list)
    infra_errors: dict[str, str] = field(default_factory=dict)
    resumed: int = 0


def cap(items: Sequence[EvalItem], max_items: int | None) -> list[EvalItem]:
    """Whole groups (a clean task with its noisy twins) until ``max_items`` are taken, so the last group may pass
    it; taken across runs in turn (run 0's first group, run 1's first, ...) so every run counts."""
    if max_items is None or len(items) <= max_items:
        return list(items)
    groups: dict[str, list[tuple[int, EvalItem]]] = {}
    for index, item in enumerate(items):
        groups.setdefault(item.attributes.get("clean_task_id") or item.id, []).append((index, item))
    rank: Counter[Any] = Counter()
    order = []
    for members in sorted(groups.values()):
        run = members[0][1].attributes.get("run")
        order.append((rank[run], -1 if run is None else run, members[0][0], members))
        rank[run] += 1
    taken: list[tuple[int, EvalItem]] = []
    for *_, members in sorted(order, key=lambda t: t[:3]):
        if len(taken) >= max_items:
            break
        taken += members
    return [item for _, item in sorted(taken, key=lambda t: t[0])]


def _figures(outcome: Outcome) -> dict[str, float | int]:
    """The running figures of an evaluation: the mean sampled score so far (Avg@n over the items done) and the
    items the engine could not serve."""
    scores = [r["score"] for r in outcome.rows if r["strategy"] == SAMPLE and r["score"] is not None]
    return {"score": sum(scores) / len(scores) if scores else float("nan"), "infra errors": len(outcome.infra_errors)}


def run_items(engine: Engine, items: Sequence[EvalItem], ctx: Context, *, summary_engine: Engine | None = None,
             checkpoint: Checkpoint | None = None, progress: bool = False) -> Outcome:
    """Every item's rows (resuming from ``checkpoint``); items the engine could not serve are left in
    ``infra_errors`` (item -> error), never scored."""
    from inference.progress import RunProgress

    cfg = ctx.config
    summarizer = engine if summary_engine is None else summary_engine
    checkpoint = checkpoint or Checkpoint(None)
    done = checkpoint.load()
    outcome = Outcome(resumed=len(done))
    todo = [item for item in items if item.id not in done]
    for rows in done.values():
        outcome.rows += rows
    kinds = {item.kind for item in todo}
    with RunProgress("evaluate", len(items), unit="item", completed=len(done), label=f"evaluate {ctx.suite} "
                     f"[{ctx.variant}]", bar=None if progress else False) as bar:
        for kind in sorted(kinds):
            batch = cfg.batch_size if kind == "prompt" else max(1, cfg.concurrency // cfg.n_samples)
            run = run_prompts if kind == "prompt" else run_envs
            chunk = [item for item in todo if item.kind == kind]
            for start in range(0, len(chunk), batch):
                part = chunk[start:start + batch]
                try:
                    results = run(engine, summarizer, part, ctx)
                except Exception as exc:
                    if not is_infrastructure(exc):
                        raise
                    outcome.infra_errors.update((item.id, f"{type(exc).__name__}: {exc}") for item in part)
                else:
                    checkpoint.add(results)
                    for rows in results.values():
                        outcome.rows += rows
                finished = bar.completed + len(part)
                bar.update(finished, {**_figures(outcome),
                                      "items/s": (finished - len(done)) / max(bar.elapsed_s(), 1e-9)})
    outcome.rows += [infra_row(item, ctx, outcome.infra_errors[item.id]) for item in todo
                     if item.id in outcome.infra_errors]
    return outcome

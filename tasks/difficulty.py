"""Stages `qa_filtered` and `task_filtered`: keep the items a reference policy sometimes solves.

Difficulty filtering (LoongRL section 3.1, stage 2; LongCat-Flash-Thinking-2601 section 3.3): every item is
attempted ``k`` times (8 in both reports) by a reference engine; GRPO learns nothing from groups whose rewards are
all 0 or all 1, so only items with ``lo <= pass_count <= hi`` are kept. The report says ``0 < p < 1``; the authors'
code kept 1..6 of 8, so the window is an explicit setting recorded on every row. Every row, kept or rejected,
carries its ``pass_count`` and ``pass_k``; a ``histogram`` output (pass_count, n) feeds the flow's plot.

The reference engine is the `tiny_policy` artifact (``engine: tiny``) or any engine spec (``hf:DIR``,
``openai:URL#MODEL``, ``vllm:DIR``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
from pydantic import Field, field_validator, model_validator

from data_contracts.stage import REJECTED, REJECTED_CONTRACT, Artifact, Contract, Expect, Params, stage
from inference.trajectory import TRAJECTORY_CONTRACT

if TYPE_CHECKING:
    from inference.agent import SamplingConfig
    from inference.engine import Engine

TINY = "tiny"
PROMPT_TOO_LONG = "prompt_too_long"
CACHE_ENV = "GYMFORGE_CACHE"
"""Directory where engine checkpoints are materialised (default: the system temp dir)."""


class FilterParams(Params):
    engine: str = Field(
        TINY, description="reference policy: 'tiny' (the tiny_policy artifact) or an engine spec hf:DIR, "
        "openai:URL#MODEL, vllm:DIR",
    )
    k: int = Field(8, ge=1, le=256, description="samples per item (both reports use 8)")
    window: tuple[int, int] | None = Field(
        None, description="inclusive pass-count window [lo, hi] kept; default [1, k-1] (0 < pass < k). "
        "LoongRL's code kept [1, 6] of 8",
    )
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of the reference engine")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    max_tokens: int = Field(32, gt=0, description="output token budget per sample (per turn for tasks)")
    seed: int = Field(0, description="seeds every request's sampling")

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        if value != TINY and value.partition(":")[0] not in ("hf", "openai", "vllm"):
            raise ValueError(f"engine={value!r}: set 'tiny' or an engine spec hf:DIR, openai:URL#MODEL, vllm:DIR")
        return value

    @model_validator(mode="after")
    def _window(self) -> FilterParams:
        if self.window is not None:
            lo, hi = self.window
            if not 0 <= lo <= hi <= self.k:
                raise ValueError(f"window={list(self.window)}: need 0 <= lo <= hi <= k={self.k}")
        return self

    def local_inputs(self) -> list[str]:
        kind, _, target = self.engine.partition(":")
        return [target] if kind in ("hf", "vllm") else []  # a served model's weights are not ours to hash

    def bounds(self) -> tuple[int, int]:
        return self.window if self.window is not None else (1, self.k - 1)

    def sampling(self) -> SamplingConfig:
        from inference.agent import SamplingConfig

        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens)


class QAFilterParams(FilterParams):
    batch_size: int = Field(32, gt=0, description="items per engine call (each item asks for k samples)")
    reward: str = Field("two_way", description="reward function of envgen/rewards.py REWARDS scoring an answer")
    max_prompt_tokens: int = Field(
        512, gt=0, description="documents are cut (by characters, ~4 per token) so the prompt stays short"
    )


class TaskFilterParams(FilterParams):
    max_turns: int = Field(8, gt=0, description="agent turns per rollout")
    concurrency: int = Field(64, gt=0, description="rollouts in flight at once (one engine batch per round)")


# ---------------------------------------------------------------------------------------------------------------
# The keep decision, separate from scoring (STYLE.md guideline 3)


def verdict(pass_count: int, k: int, window: tuple[int, int]) -> str | None:
    """``None`` when kept, else the reason: ``too_hard`` (below the window) or ``too_easy`` (above it)."""
    lo, hi = window
    if not 0 <= pass_count <= k:
        raise ValueError(f"pass_count={pass_count} outside [0, k={k}]")
    if pass_count < lo:
        return "too_hard"
    if pass_count > hi:
        return "too_easy"
    return None


def split_by_window(frame: pl.DataFrame, pass_counts: Sequence[int], params: FilterParams, kept: str,
                    unscorable: Sequence[bool] | None = None) -> dict[str, pl.DataFrame]:
    """Attach pass counts and the window to every row; split into the ``kept`` output, rejected rows and the
    histogram. Rows marked ``unscorable`` (the reference engine could not even read the prompt) are rejected as
    ``prompt_too_long`` whatever their count."""
    lo, hi = params.bounds()
    reasons = [verdict(p, params.k, (lo, hi)) for p in pass_counts]
    if unscorable is not None:
        reasons = [PROMPT_TOO_LONG if bad else reason for reason, bad in zip(reasons, unscorable, strict=True)]
    scored = frame.with_columns(
        pl.Series("pass_count", list(pass_counts), dtype=pl.Int64),
        pl.lit(params.k, dtype=pl.Int64).alias("pass_k"),
        pl.lit(f"{lo}..{hi}").alias("pass_window"),
        pl.Series("reason", reasons, dtype=pl.String),
    )
    histogram = pl.DataFrame(
        {"pass_count": range(params.k + 1), "n": [list(pass_counts).count(p) for p in range(params.k + 1)]},
        schema={"pass_count": pl.Int64, "n": pl.Int64},
    )
    return {
        kept: scored.filter(pl.col("reason").is_null()).drop("reason"),
        REJECTED: scored.filter(pl.col("reason").is_not_null()),
        "histogram": histogram,
    }


PASS_COLUMNS = {"pass_count": pl.Int64, "pass_k": pl.Int64, "pass_window": pl.String}
PASS_EXPECTATIONS = (
    Expect("ExpectColumnValuesToNotBeNull", column="pass_count"),
    Expect("ExpectColumnPairValuesAToBeGreaterThanB", column_A="pass_k", column_B="pass_count", or_equal=True),
)
HISTOGRAM_CONTRACT = Contract(
    columns={"pass_count": pl.Int64, "n": pl.Int64},
    expectations=(Expect("ExpectColumnValuesToBeBetween", column="n", min_value=0),),
)
REJECTED_PASS_CONTRACT = Contract(
    columns={**REJECTED_CONTRACT.columns, **PASS_COLUMNS},
    expectations=(Expect("ExpectColumnValuesToBeInSet", column="reason", value_set=["too_hard", "too_easy", PROMPT_TOO_LONG]),),
)


def plot_pass_histogram(histogram: pl.DataFrame, path: str | Path, title: str = "pass count per item") -> Path:
    """Write a bar chart of a ``histogram`` output (pass_count, n) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
    try:
        ax.bar(histogram["pass_count"].to_list(), histogram["n"].to_list(), color="#4477aa")
        ax.set_xlabel(f"pass count (of {int(histogram['pass_count'].max())})")
        ax.set_ylabel("items")
        ax.set_title(title)
        ax.set_xticks(histogram["pass_count"].to_list())
        fig.tight_layout()
        fig.savefig(path, metadata={"Software": None})  # no version stamp: identical bytes per input
    finally:
        plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------------
# Engines


def open_engine(spec: str, policy: Artifact | None) -> Engine:
    """The reference engine: ``tiny`` materialises the tiny_policy checkpoint into the cache (keyed by the
    artifact key) and serves it with the transformers engine."""
    from inference.engines import load_engine

    if spec == TINY:
        from training.tiny_policy import materialize_checkpoint

        if policy is None:
            raise ValueError("engine='tiny' needs the tiny_policy input artifact")
        cache = Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "gymforge-cache")
        spec = f"hf:{materialize_checkpoint(policy, cache / 'checkpoints')}"
    return load_engine(spec)


def _with_engine(params: FilterParams, inputs: Mapping[str, Artifact],
                 fn: Callable[[Engine], dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    engine = open_engine(params.engine, inputs.get("tiny_policy"))
    try:
        return fn(engine)
    finally:
        engine.close()


# ---------------------------------------------------------------------------------------------------------------
# QA seeds


def filter_qa(seeds: pl.DataFrame, engine: Engine, params: QAFilterParams) -> dict[str, pl.DataFrame]:
    """Score every seed with ``k`` samples of ``engine`` and split by the pass-count window."""
    from envgen.rewards import get_reward
    from inference.agent import AgentConfig, qa_prompt_items, rollout_prompts

    config = AgentConfig(sampling=params.sampling(), seed=params.seed)
    groups = rollout_prompts(engine, qa_prompt_items(seeds, params.max_prompt_tokens), params.k, get_reward(params.reward),
                             config, source="qa_filtered", batch_size=params.batch_size)
    pass_counts = [sum(t.verified for t in group) for group in groups]
    return split_by_window(seeds, pass_counts, params, kept="seeds")


@stage(
    name="qa_filtered",
    version="2",  # 2: the two-way reward refuses candidate lists, padding and name fragments
    inputs=("qa_seeds", "tiny_policy"),
    params=QAFilterParams,
    outputs={
        "seeds": Contract(
            columns={"id": pl.String, "question": pl.String, "answer": pl.String, "docs": pl.String, **PASS_COLUMNS},
            expectations=(Expect("ExpectColumnValuesToBeUnique", column="id"), *PASS_EXPECTATIONS),
        ),
        REJECTED: REJECTED_PASS_CONTRACT,
        "histogram": HISTOGRAM_CONTRACT,
    },
)
def qa_filtered(inputs: Mapping[str, Artifact], params: QAFilterParams, partition: str) -> dict[str, pl.DataFrame]:
    """QA seeds a reference policy answers correctly on some but not all of k samples (LoongRL section 3.1)."""
    seeds = inputs["qa_seeds"].read("seeds")
    return _with_engine(params, inputs, lambda engine: filter_qa(seeds, engine, params))


# ---------------------------------------------------------------------------------------------------------------
# Environment tasks


def filter_tasks(environments: pl.DataFrame, tasks: pl.DataFrame, engine: Engine,
                 params: TaskFilterParams) -> dict[str, pl.DataFrame]:
    """``k`` agent-loop rollouts of every task in its environment (a fresh database copy each), split by the
    pass-count window; the rollouts are kept as ``trajectories``."""
    from functools import partial

    from envgen.runtime import Environment
    from inference.agent import AgentConfig, Episode, run_episodes
    from inference.trajectory import trajectories_frame

    records = {row["env_id"]: row for row in environments.iter_rows(named=True)}
    missing = sorted(set(tasks["env_id"]) - set(records))
    if missing:
        raise ValueError(f"tasks refer to environments missing from the environments output: {missing[:5]}")
    episodes = [
        Episode(id=f"{task['task_id']}#{j}", group_id=task["task_id"], task=task, env_id=task["env_id"],
                make_env=partial(Environment, records[task["env_id"]]), task_id=task["task_id"], sample_index=j)
        for task in tasks.iter_rows(named=True)
        for j in range(params.k)
    ]
    config = AgentConfig(sampling=params.sampling(), max_turns=params.max_turns, concurrency=params.concurrency,
                         seed=params.seed)
    trajectories = run_episodes(engine, episodes, config, source="task_filtered")
    groups = [trajectories[i:i + params.k] for i in range(0, len(trajectories), params.k)]
    unscorable = [all(t.stop_reason == "context_overflow" and not t.turns() for t in group) for group in groups]
    outputs = split_by_window(tasks, [sum(t.verified for t in group) for group in groups], params, kept="tasks",
                              unscorable=unscorable)
    outputs["trajectories"] = trajectories_frame(trajectories)
    return outputs


@stage(
    name="task_filtered",
    version="1",
    inputs=("environments", "tiny_policy"),
    params=TaskFilterParams,
    outputs={
        "tasks": Contract(
            columns={"task_id": pl.String, "env_id": pl.String, **PASS_COLUMNS},
            expectations=(Expect("ExpectColumnValuesToBeUnique", column="task_id"), *PASS_EXPECTATIONS),
        ),
        REJECTED: REJECTED_PASS_CONTRACT,
        "histogram": HISTOGRAM_CONTRACT,
        "trajectories": TRAJECTORY_CONTRACT,
    },
)
def task_filtered(inputs: Mapping[str, Artifact], params: TaskFilterParams, partition: str) -> dict[str, pl.DataFrame]:
    """Environment tasks a reference policy completes in some but not all of k agent-loop rollouts."""
    environments = inputs["environments"].read("environments")
    tasks = inputs["environments"].read("tasks")
    return _with_engine(params, inputs, lambda engine: filter_tasks(environments, tasks, engine, params))

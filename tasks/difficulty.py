"""Difficulty filtering, shared by the stages `qa_filtered` and `task_filtered`: keep the items a reference policy
sometimes solves.

Difficulty filtering (LoongRL section 3.1, stage 2; LongCat-Flash-Thinking-2601 section 3.3): every item is
attempted ``k`` times (8 in both reports) by a reference engine; GRPO learns nothing from groups whose rewards are
all 0 or all 1, so only items with ``lo <= pass_count <= hi`` are kept. The report says ``0 < p < 1``; the authors'
code kept 1..6 of 8, so the window is an explicit setting recorded on every row. Every row, kept or rejected,
carries its ``pass_count`` and ``pass_k``; a ``histogram`` output (pass_count, n) feeds the flow's plot.

The reference engine is the `tiny_policy` artifact (``engine: tiny``) or any engine spec (``hf:DIR``,
``openai:URL#MODEL``, ``vllm:DIR``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
from pydantic import Field, field_validator, model_validator

from data_contracts.schemas import Record, at_most, between, in_set, not_null
from data_contracts.stage import REJECTED, Artifact, Check, Contract, Params
from envgen.rewards import normalize
from inference.engine_spec import engine_or, hf_spec
from inference.plotting import save_figure
from tasks.records import PASS_HISTOGRAM

if TYPE_CHECKING:
    from inference.agent import SamplingConfig
    from inference.engine import Engine

TINY = "tiny"
PROMPT_TOO_LONG = "prompt_too_long"
ANSWER_OVER_CAP = "answer_over_cap"
REASONS = ("too_hard", "too_easy", PROMPT_TOO_LONG, ANSWER_OVER_CAP)


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
        return engine_or(value, {TINY: "the tiny_policy artifact"})

    @model_validator(mode="after")
    def _window(self) -> FilterParams:
        if self.window is not None:
            lo, hi = self.window
            if not 0 <= lo <= hi <= self.k:
                raise ValueError(f"window={list(self.window)}: need 0 <= lo <= hi <= k={self.k}")
        return self

    def local_inputs(self) -> list[str]:
        from inference.engine_spec import EngineSpec

        return [] if self.engine == TINY else EngineSpec.parse(self.engine).local_inputs()

    def bounds(self) -> tuple[int, int]:
        return self.window if self.window is not None else (1, self.k - 1)

    def sampling(self) -> SamplingConfig:
        from inference.agent import SamplingConfig

        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens)


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
    histogram = PASS_HISTOGRAM.frame([{"pass_count": p, "n": list(pass_counts).count(p)} for p in range(params.k + 1)])
    return {
        kept: scored.filter(pl.col("reason").is_null()).drop("reason"),
        REJECTED: scored.filter(pl.col("reason").is_not_null()),
        "histogram": histogram,
    }


def cap_per_answer(kept: pl.DataFrame, rejected: pl.DataFrame, cap: int | None,
                   column: str = "answer") -> tuple[pl.DataFrame, pl.DataFrame]:
    """Keep at most ``cap`` rows per answer (case- and space-insensitive) so that a policy guessing the most common
    answer stops earning reward; the rest move to ``rejected`` as ``answer_over_cap``. Answers are compared
normalized (case, accents, punctuation, articles), as the reward compares them. Which rows stay is decided by
    a hash of each row's ``id``, so the choice is stable across runs and independent of row order."""
    if cap is None or kept.is_empty():
        return kept, rejected
    normal = pl.col(column).map_elements(normalize, return_dtype=pl.String)
    ranked = kept.with_columns(
        pl.col("id").hash(seed=0).rank("ordinal").over(normal).alias("_rank")
    )
    over = ranked.filter(pl.col("_rank") > cap).drop("_rank").with_columns(pl.lit(ANSWER_OVER_CAP).alias("reason"))
    return ranked.filter(pl.col("_rank") <= cap).drop("_rank"), pl.concat([rejected, over], how="diagonal_relaxed")


def filter_outputs(kept: str, record: Record, rejected: Record, checks: Sequence[Check] = ()) -> dict[str, Contract]:
    """The contracts of a filter's outputs: the kept rows (``record``: the items with their pass columns, and
    ``checks``), the ``rejected`` ones with their reason, the histogram."""
    pass_rules = (*not_null("pass_count"), at_most("pass_count", "pass_k"))
    return {
        kept: record.contract(expectations=pass_rules, checks=checks),
        REJECTED: rejected.contract(expectations=(in_set("reason", REASONS),)),
        "histogram": PASS_HISTOGRAM.contract(expectations=(between("n", min_value=0),)),
    }


def plot_pass_histogram(histogram: pl.DataFrame, path: str | Path, title: str = "pass count per item") -> Path:
    """Write a bar chart of a ``histogram`` output (pass_count, n) as a PNG."""
    path = Path(path)
    with save_figure(path, figsize=(5, 3)) as (_, ax):
        ax.bar(histogram["pass_count"].to_list(), histogram["n"].to_list(), color="#4477aa")
        ax.set_xlabel(f"pass count (of {int(histogram['pass_count'].max())})")
        ax.set_ylabel("items")
        ax.set_title(title)
        ax.set_xticks(histogram["pass_count"].to_list())
    return path


def pass_count_figure(artifact: Artifact, path: Path) -> None:
    """The figure of a difficulty filter's artifact: its pass-count histogram."""
    plot_pass_histogram(artifact.read("histogram"), path)


# ---------------------------------------------------------------------------------------------------------------
# Engines


def open_engine(spec: str, policy: Artifact | None) -> Engine:
    """The reference engine: ``tiny`` serves the tiny_policy model artifact's checkpoint with the transformers
    engine; any other spec names its engine."""
    from inference.engine_factory import load_engine

    if spec == TINY:
        if policy is None:
            raise ValueError("engine='tiny' needs the tiny_policy input artifact")
        spec = hf_spec(policy.directory)
    return load_engine(spec)


def with_engine(params: FilterParams, inputs: Mapping[str, Artifact],
                 fn: Callable[[Engine], dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    engine = open_engine(params.engine, inputs.get("tiny_policy"))
    try:
        return fn(engine)
    finally:
        engine.close()




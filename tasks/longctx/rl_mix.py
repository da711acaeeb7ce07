"""Stage `rl_mix`: LoongRL's RL data mixture and multi-stage curriculum (LoongRL section 3.2.2, Table 1).

Table 1 (21,024 examples): 7,500 KeyChain, 7,500 regular long-context multi-hop QA (the keychain stage's `regular`
output: same extension, the question asked directly; or short QA from the kept seeds), 1,024 needles (512 multi-key, 512
multi-value), 5,000 short math (2,500 hard open-ended, 2,500 easy multiple-choice). The counts are params; a
category with fewer items than asked contributes what it has, and the `summary` output says so.

The curriculum is rows, one per (item, stage), marked by ``curriculum_stage``:

- ``warmup``: everything but KeyChain (the 7B recipe; the 14B recipe skips it: leave it out of ``curriculum``);
- ``stage1``: everything;
- ``stage2``: hard mining, every item except those solved in all ``k`` rollouts. The pass counts come from the rows
  themselves (``pass_count``/``pass_k`` carried from the difficulty filter) or from a pass-count table (a parquet
  file with ``id, pass_count, k``, e.g. the difficulty filter run with the Stage I checkpoint), which wins for the ids
  it lists. An item without a count is kept: unknown is not solved.

Each row carries the chat ``prompt`` (JSON messages), the ``answer`` (and ``aliases``) and ``reward_fn``, the name
of its reward in ``envgen.rewards.REWARDS``: what TRL's GRPOTrainer reads (``gymforge export`` writes the prompt as a
list of messages; ``envgen.rewards.score_by_reward_fn`` scores each row with its reward). ``seed_prompt`` and
``question_prompt`` build the prompts, also for an exported artifact that has none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import in_set
from data_contracts.stage import Artifact, Check, Params, stage
from envgen.rewards import BOXED_INSTRUCTION
from tasks.longctx.records import MIX_SUMMARY, RL_MIX

STAGE = "rl_mix"
CURRICULUM = ("warmup", "stage1", "stage2")
TABLE_1 = {"keychain": 7500, "qa": 7500, "needle_multikey": 512, "needle_multivalue": 512, "math_hard": 2500,
           "math_easy": 2500}
QA_REWARD = "two_way"  # LoongRL's two-way substring exact match, hardened (envgen/rewards.py)


class MixParams(Params):
    seed: int = Field(0, description="seed of the per-category sampling and of the row order in each stage")
    counts: dict[str, int] = Field(default_factory=lambda: dict(TABLE_1),
                                   description="items per category (LoongRL Table 1 by default)")
    scale: float = Field(1.0, gt=0, le=1000, description="multiplies every count (e.g. 0.01 for a tiny run)")
    curriculum: list[Literal["warmup", "stage1", "stage2"]] = Field(
        default_factory=lambda: list(CURRICULUM),
        description="stages to emit: warmup, stage1, stage2 (7B recipe); stage1, stage2 (14B recipe)")
    pass_table: str | None = Field(None, description="parquet with id, pass_count, k for stage2 hard mining; by "
                                                     "default the pass_count/pass_k columns on the rows")
    qa_source: Literal["long", "short"] = Field(
        "long", description="long: the keychain stage's regular long-context QA (the report's standard multi-hop "
        "QA); short: the kept seeds with only their own documents")
    qa_split: str = Field("train", description="split of the regular QA seeds when qa_source is short")

    @field_validator("counts")
    @classmethod
    def _counts(cls, v: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(v) - set(TABLE_1))
        if unknown:
            raise ValueError(f"counts: unknown categories {unknown}; allowed: {', '.join(TABLE_1)}")
        if any(n < 0 for n in v.values()):
            raise ValueError("counts: every count must be >= 0")
        return {**dict.fromkeys(TABLE_1, 0), **v}

    @field_validator("curriculum")
    @classmethod
    def _curriculum(cls, v: list[str]) -> list[str]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"curriculum={v}: list each of warmup, stage1, stage2 at most once, at least one")
        return sorted(v, key=CURRICULUM.index)

    @field_validator("pass_table")
    @classmethod
    def _pass_table(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"pass_table={v!r}: set the path of a parquet file with id, pass_count, k")
        return v

    def local_inputs(self) -> list[str]:
        return [self.pass_table] if self.pass_table else []


def seed_prompt(question: str, docs: str) -> str:
    """A QA seed asked on its own documents (``docs`` as JSON), with the ``qa_prompt`` the difficulty filter also
    uses: chat messages as JSON."""
    from inference.agent import qa_prompt

    return json.dumps(qa_prompt(question, json.loads(docs)), ensure_ascii=False)


def question_prompt(question: str) -> str:
    """A question asked on its own (math), the answer in ``\\boxed{}``: chat messages as JSON."""
    return json.dumps([{"role": "user", "content": f"{question}\n{BOXED_INSTRUCTION}"}], ensure_ascii=False)


def keychain_rows(frame: pl.DataFrame, category: str) -> pl.DataFrame:
    """Rows of a `keychain` output: ``keychain`` (KeyChain examples) or ``regular`` (category ``qa``)."""
    return frame.select(
        "id", pl.lit(category).alias("category"), "prompt", "answer", "aliases",
        pl.lit(QA_REWARD).alias("reward_fn"), pl.col("seed_id").alias("source_id"), "tokens", "pass_count", "pass_k")


def qa_rows(seeds: pl.DataFrame, exclude: pl.Series) -> pl.DataFrame:
    """Regular multi-hop QA on the seed's own documents (``seed_prompt``); seeds already turned into KeyChain
    examples are left out so no question appears in both forms."""
    seeds = seeds.filter(~pl.col("id").is_in(exclude.implode()))
    prompts = [seed_prompt(q, d) for q, d in seeds.select("question", "docs").iter_rows()]
    return seeds.select(
        pl.format("qa-{}", "id").alias("id"), pl.lit("qa").alias("category"), pl.Series("prompt", prompts),
        "answer", "aliases", pl.lit(QA_REWARD).alias("reward_fn"), pl.col("id").alias("source_id"),
        pl.lit(None, pl.Int64).alias("tokens"),
        *(pl.col(c).cast(pl.Int64) if c in seeds.columns else pl.lit(None, pl.Int64).alias(c)
          for c in ("pass_count", "pass_k")))


def needle_rows(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(
        "id", pl.format("needle_{}", "task").alias("category"), "prompt", "answer",
        pl.lit([], pl.List(pl.String)).alias("aliases"), pl.lit("needle_all").alias("reward_fn"),
        pl.col("id").alias("source_id"), "tokens", pl.lit(None, pl.Int64).alias("pass_count"),
        pl.lit(None, pl.Int64).alias("pass_k"))


def math_rows(problems: pl.DataFrame) -> pl.DataFrame:
    prompts = [question_prompt(q) for q in problems["question"]]
    return problems.select(
        pl.format("math-{}", "id").alias("id"),
        pl.when(pl.col("kind") == "hard").then(pl.lit("math_hard")).otherwise(pl.lit("math_easy")).alias("category"),
        pl.Series("prompt", prompts), "answer", pl.lit([], pl.List(pl.String)).alias("aliases"), "reward_fn",
        pl.col("id").alias("source_id"), pl.lit(None, pl.Int64).alias("tokens"),
        pl.lit(None, pl.Int64).alias("pass_count"), pl.lit(None, pl.Int64).alias("pass_k"))


def _order(seed: int, ids: pl.Series, salt: str) -> pl.Series:
    return pl.Series([hashlib.blake2b(f"{seed}/{salt}/{i}".encode(), digest_size=8).hexdigest() for i in ids])


def sample_categories(pool: pl.DataFrame, params: MixParams) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Up to ``round(count * scale)`` items per category, chosen by a seeded hash of the id (stable under input
    order); the summary records requested, available and taken counts."""
    parts, summary = [], []
    for category, count in params.counts.items():
        want = round(count * params.scale)
        items = pool.filter(pl.col("category") == category)
        taken = items.with_columns(_order(params.seed, items["id"], category).alias("_o")).sort("_o").head(want)
        parts.append(taken.drop("_o"))
        summary.append({"category": category, "requested": want, "available": items.height, "taken": taken.height})
    return pl.concat(parts), MIX_SUMMARY.frame(summary)


def solved_in_all(items: pl.DataFrame, pass_table: str | None) -> pl.Series:
    """True for items solved in all k rollouts (LoongRL section 3.2.2, Stage II)."""
    counts = items.select("id", "pass_count", pl.col("pass_k").alias("k"))
    if pass_table is not None:
        table = pl.read_parquet(pass_table)
        missing = {"id", "pass_count", "k"} - set(table.columns)
        if missing:
            raise ValueError(f"pass_table {pass_table} lacks columns {sorted(missing)} (needs id, pass_count, k)")
        if table.is_empty():  # Stage II would silently mine nothing
            raise ValueError(f"pass_table {pass_table} holds no rows; give the pass counts of a filter run")
        table = table.select("id", pl.col("pass_count").cast(pl.Int64), pl.col("k").cast(pl.Int64))
        counts = counts.update(table, on="id", how="left")
    return ((counts["pass_count"] >= counts["k"]) & (counts["k"] > 0)).fill_null(False)


def curriculum_rows(items: pl.DataFrame, params: MixParams) -> pl.DataFrame:
    solved = solved_in_all(items, params.pass_table)
    chosen = {
        "warmup": items.filter(pl.col("category") != "keychain"),
        "stage1": items,
        "stage2": items.filter(~solved),
    }
    frames = []
    for name in params.curriculum:
        frame = chosen[name].with_columns(pl.lit(name).alias("curriculum_stage"))
        frames.append(frame.with_columns(_order(params.seed, frame["id"], name).alias("_o")).sort("_o").drop("_o"))
    return pl.concat(frames).select(list(RL_MIX.columns))


def _unknown_reward(frame: pl.DataFrame) -> pl.Series:
    from envgen.rewards import REWARDS

    return ~frame["reward_fn"].is_in(list(REWARDS))


def _bad_prompt(frame: pl.DataFrame) -> list[bool]:
    def bad(raw: str) -> bool:
        try:
            messages = json.loads(raw)
        except ValueError:
            return True
        return not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and m.get("role") in ("system", "user") and isinstance(m.get("content"), str)
            for m in messages))

    return [bad(p) for p in frame["prompt"]]


MIX_CONTRACT = RL_MIX.contract(
    expectations=(in_set("curriculum_stage", list(CURRICULUM)), in_set("category", list(TABLE_1))),
    checks=(
        Check("reward_fn_registered", _unknown_reward, description="reward_fn names a reward in envgen.rewards"),
        Check("prompt_is_chat", _bad_prompt, description="prompt is a JSON list of system/user messages"),
        Check("no_keychain_in_warmup",
              lambda f: (f["curriculum_stage"] == "warmup") & (f["category"] == "keychain"),
              description="the warm-up stage holds no KeyChain data"),
    ),
)


@stage(
    name=STAGE,
    version="1",
    inputs=("keychain", "needles", "math_seeds", "qa_filtered"),
    params=MixParams,
    outputs={"mix": MIX_CONTRACT, "summary": MIX_SUMMARY.contract()},
)
def rl_mix(inputs: Mapping[str, Artifact], params: MixParams, partition: str) -> dict[str, pl.DataFrame]:
    """LoongRL Table 1 mixture with warm-up / Stage I / Stage II (hard-mined) curriculum rows."""
    keychain = inputs["keychain"].read("keychain")
    if params.qa_source == "long":
        qa = keychain_rows(inputs["keychain"].read("regular"), "qa")
    else:
        seeds = inputs["qa_filtered"].read("seeds")
        if "split" in seeds.columns:
            seeds = seeds.filter(pl.col("split") == params.qa_split)
        qa = qa_rows(seeds, keychain["seed_id"])
    pool = pl.concat([
        keychain_rows(keychain, "keychain"),
        qa,
        needle_rows(inputs["needles"].read("needles")),
        math_rows(inputs["math_seeds"].read("problems")),
    ], how="vertical_relaxed")
    items, summary = sample_categories(pool, params)
    return {"mix": curriculum_rows(items, params), "summary": summary}

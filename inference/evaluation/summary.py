"""From per-item results to figures: the ``eval_summary`` rows of an evaluation, and comparisons.

- accuracy of a strategy at a width; ``avg@k`` of the plain samples (and of each context strategy); unbiased
  ``pass@k`` for every width from each item's ``n`` samples and ``c`` correct; each over all items and over each
  breakdown (domain, difficulty, length bucket, noise level, noise transform, run), with a bootstrap interval over
  items. Items the model trained on (``overlap``) and items the engine could not serve (``infra_error``) are left
  out and counted.
- the robustness gap (LongCat-Flash-Thinking-2601 Table 1): success on a clean task minus success on its noisy
  twin, paired by task, per level and per transform.
- matched budgets: self-consistency's accuracy interpolated at the tokens each Heavy Thinking result spent
  (``sc_at_budget``: generated; ``sc_at_read_budget``: generated plus the summary stage's prompt), so the two are
  compared at equal tokens, not equal width, with the paired difference and its interval (``ht_minus_sc_*``). Both
  are over the same items: an item whose prompt overflows has a zero-scored row for every strategy.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import polars as pl

from data_contracts.schemas import JSON, Record, cols
from inference.metrics import bootstrap_ci, interpolate, pass_at_k

EVAL_SUMMARY = Record("eval_summary", "One figure of an evaluation: a metric of a strategy at a width over a group of "
                      "items, with its bootstrap interval.", cols(
    suite=(pl.String, "the suite"),
    variant=(pl.String, "the held-out variant"),
    strategy=(pl.String, "the strategy, as in eval_item"),
    k=(pl.Int64, "width, or the k of Pass@k / Avg@k"),
    metric=(pl.String, ("accuracy | pass@k | avg@k | gap (clean minus noisy twin, paired) | sc_at_budget / "
                       "sc_at_read_budget (self-consistency interpolated at this result's generated tokens / generated "
                       "plus summary-prompt tokens) | ht_minus_sc_at_budget / ht_minus_sc_at_read_budget (the paired "
                       "difference per item, with its interval)")),
    group=(pl.String, ("all, or the attribute items are grouped by (domain, difficulty, length, noise_level, "
                      "noise_type, run, source)")),
    value=(pl.String, "the group's value (all for the whole suite)"),
    n=(pl.Int64, "items in the figure"),
    estimate=(pl.Float64, "the figure"),
    ci_lo=(pl.Float64, "lower end of its bootstrap interval"),
    ci_hi=(pl.Float64, "upper end"),
    tokens=(pl.Float64, "mean generated tokens per item"),
    n_overlap=(pl.Int64, "items of the group left out because the model trained on them"),
    n_infra_errors=(pl.Int64, "items of the group left out because the engine failed"),
    failures=(JSON, "{agent, user, tool}: failure labels over the group's samples"),
), key=("strategy", "k", "metric", "group", "value"), required=("metric", "n"), json={"failures": "object"})

SAMPLE = "sample"


def length_bucket(tokens: int | None) -> str | None:
    """The power of two at or above a prompt length (1024, 2048, ...): lengths of one target fall in one bucket."""
    return None if tokens is None else str(1 << max(0, math.ceil(math.log2(max(tokens, 1)))))


def _group_values(row: Mapping[str, Any], group: str) -> list[str]:
    if group == "all":
        return ["all"]
    if group == "noise_type":
        return list(row.get("noise_types") or []) or (["clean"] if not row.get("noise_level") else [])
    value = length_bucket(row.get("length")) if group == "length" else row.get(group)
    return [] if value is None else [str(value)]


def _failures(rows: Iterable[Mapping[str, Any]]) -> str:
    total: Counter[str] = Counter()
    for row in rows:
        total.update(json.loads(row.get("failures") or "{}"))
    return json.dumps(dict(total), sort_keys=True)


class _Figures:
    def __init__(self, suite: str, variant: str, resamples: int, confidence: float, seed: int) -> None:
        self.suite, self.variant = suite, variant
        self.resamples, self.confidence, self.seed = resamples, confidence, seed
        self.rows: list[dict[str, Any]] = []

    def add(self, strategy: str, k: int, metric: str, group: str, value: str, scores: Sequence[float],
            tokens: Sequence[float], members: Sequence[Mapping[str, Any]]) -> None:
        if scores:
            est = bootstrap_ci(scores, resamples=self.resamples, confidence=self.confidence, seed=self.seed)
            estimate, lo, hi = est.value, est.lo, est.hi
        else:
            estimate = lo = hi = None
        self.rows.append({
            "suite": self.suite, "variant": self.variant, "strategy": strategy, "k": k, "metric": metric,
            "group": group, "value": value, "n": len(scores), "estimate": estimate, "ci_lo": lo, "ci_hi": hi,
            "tokens": sum(tokens) / len(tokens) if tokens else None,
            "n_overlap": sum(bool(m["overlap"]) for m in members),
            "n_infra_errors": sum(m["status"] == "infra_error" for m in members),
            "failures": _failures(members)})


def summarize(items: pl.DataFrame, breakdowns: Sequence[str], ks: Sequence[int], *, resamples: int = 1000,
              confidence: float = 0.95, seed: int = 0) -> pl.DataFrame:
    """The ``eval_summary`` rows of one evaluation's ``eval_item`` rows."""
    if items.is_empty():
        return EVAL_SUMMARY.frame()
    suite, variant = items["suite"][0], items["variant"][0]
    figures = _Figures(suite, variant, resamples, confidence, seed)
    rows = items.to_dicts()
    groups = ("all", *breakdowns)
    for (strategy, k), members in _by(rows, ("strategy", "k")).items():
        metric = "accuracy" if strategy not in (SAMPLE,) and not strategy.startswith("context:") else "avg@k"
        for group in groups:
            for value, part in _split(members, group).items():
                usable = [r for r in part if _usable(r)]
                figures.add(strategy, k, metric, group, value, [r["score"] for r in usable],
                            [r["tokens"] for r in usable], part)
                if strategy == SAMPLE:
                    for kk in ks:
                        enough = [r for r in usable if r["n_samples"] >= kk]
                        figures.add(SAMPLE, kk, "pass@k", group, value,
                                    [pass_at_k(r["n_samples"], r["n_correct"], kk) for r in enough],
                                    [r["tokens"] * kk / r["n_samples"] for r in enough], part)
    _gaps(figures, rows, groups)
    frame = EVAL_SUMMARY.frame(figures.rows)
    if frame.is_empty():
        return frame
    matched = matched_budget(frame, rows, resamples=resamples, confidence=confidence, seed=seed)
    return pl.concat([frame, matched], how="vertical")


def _usable(row: Mapping[str, Any]) -> bool:
    return row["status"] == "scored" and not row["overlap"] and row["score"] is not None


def _by(rows: Iterable[Mapping[str, Any]], keys: Sequence[str]) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    out: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return dict(sorted(out.items(), key=lambda kv: tuple(str(x) for x in kv[0])))


def _split(rows: Iterable[Mapping[str, Any]], group: str) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        for value in _group_values(row, group):
            out.setdefault(value, []).append(row)
    return dict(sorted(out.items()))


def _gaps(figures: _Figures, rows: Sequence[Mapping[str, Any]], groups: Sequence[str]) -> None:
    """Clean minus noisy twin, per pair of one task, over the plain samples' Avg@k."""
    samples = [r for r in rows if r["strategy"] == SAMPLE]
    clean = {r["item_id"]: r for r in samples if not r["noise_level"] and _usable(r)}
    twins = [r for r in samples if r["noise_level"] and r["clean_task_id"] in clean]
    if not twins:
        return
    k = twins[0]["k"]
    for group in (g for g in groups if g in ("all", "noise_level", "noise_type", "domain")):
        for value, part in _split(twins, group).items():
            usable = [r for r in part if _usable(r)]
            figures.add(SAMPLE, k, "gap", group, value, [clean[r["clean_task_id"]]["score"] - r["score"] for r in usable],
                        [r["tokens"] for r in usable], part)


def matched_budget(summary: pl.DataFrame, items: Sequence[Mapping[str, Any]], *, resamples: int = 1000,
                   confidence: float = 0.95, seed: int = 0) -> pl.DataFrame:
    """For each Heavy Thinking result (all items), self-consistency at the same budget, interpolated on its budget
    curve (linear in log tokens) and absent where the curve does not reach it. Two budgets: the tokens generated
    (``sc_at_budget``) and those plus the summary stage's prompt tokens, the k answers it read (``sc_at_read_budget``).
    Each comes with the paired difference Heavy Thinking minus self-consistency at that budget
    (``ht_minus_sc_at_budget``, ``ht_minus_sc_at_read_budget``): per item, its self-consistency scores at the two
    widths around the budget weighted as the curve is, and a bootstrap interval over the items."""
    from inference.metrics import paired_bootstrap_ci

    overall = summary.filter((pl.col("group") == "all") & (pl.col("metric") == "accuracy")
                             & pl.col("estimate").is_not_null())
    curve = sorted((t, e, k) for t, e, k in overall.filter(pl.col("strategy") == "self_consistency")
                   .select("tokens", "estimate", "k").iter_rows())
    usable = [r for r in items if _usable(r)]
    sc = {(r["item_id"], r["k"]): r["score"] for r in usable if r["strategy"] == "self_consistency"}
    rows = []
    for row in overall.filter(pl.col("strategy") == "heavy_thinking").iter_rows(named=True):
        heavy = [r for r in usable if r["strategy"] == "heavy_thinking" and r["k"] == row["k"]]
        read = row["tokens"] + sum(r["summary_prompt_tokens"] or 0 for r in heavy) / max(1, len(heavy))
        for metric, budget in (("sc_at_budget", row["tokens"]), ("sc_at_read_budget", read)):
            value = interpolate([(t, e) for t, e, _ in curve], budget)
            if value is None:
                continue
            rows.append({**row, "metric": metric, "estimate": value, "ci_lo": None, "ci_hi": None,
                         "tokens": budget})
            (k0, k1), w = _bracket(curve, budget)
            paired = [(r["score"], (1 - w) * sc[r["item_id"], k0] + w * sc[r["item_id"], k1]) for r in heavy
                      if (r["item_id"], k0) in sc and (r["item_id"], k1) in sc]
            if paired:
                diff = paired_bootstrap_ci([a for a, _ in paired], [b for _, b in paired], resamples, confidence,
                                           seed)
                rows.append({**row, "metric": f"ht_minus_sc_{metric.removeprefix('sc_')}", "n": len(paired),
                             "estimate": diff.value, "ci_lo": diff.lo, "ci_hi": diff.hi, "tokens": budget})
    return EVAL_SUMMARY.frame(rows)


def _bracket(curve: Sequence[tuple[float, float, int]], budget: float) -> tuple[tuple[int, int], float]:
    """The self-consistency widths whose mean tokens bracket ``budget`` and the weight of the upper one, as
    :func:`inference.metrics.interpolate` weighs them (linear in log tokens)."""
    for (t0, _, k0), (t1, _, k1) in pairwise(curve):
        if t0 <= budget <= t1:
            if t1 == t0:
                return (k1, k1), 1.0
            lt0, lt1, lb = (math.log(max(v, 1e-9)) for v in (t0, t1, budget))
            return (k0, k1), (lb - lt0) / (lt1 - lt0)
    k = curve[-1][2]
    return (k, k), 1.0


def compare(a: pl.DataFrame, b: pl.DataFrame, *, resamples: int = 1000, confidence: float = 0.95,
            seed: int = 0) -> pl.DataFrame:
    """B minus A on the items both scored, per suite, variant, strategy and width: the paired mean difference with
    its bootstrap interval (the same item under two models)."""
    from inference.metrics import paired_bootstrap_ci

    keys = ["suite", "variant", "strategy", "k", "item_id"]
    usable = (pl.col("status") == "scored") & ~pl.col("overlap") & pl.col("score").is_not_null()
    joined = (a.filter(usable).select(*keys, pl.col("score").alias("a"))
              .join(b.filter(usable).select(*keys, pl.col("score").alias("b")), on=keys))
    rows = []
    for (suite, variant, strategy, k), part in sorted(joined.group_by(keys[:4]), key=lambda g: tuple(map(str, g[0]))):
        diff = paired_bootstrap_ci(part["b"].to_list(), part["a"].to_list(), resamples, confidence, seed)
        rows.append({"suite": suite, "variant": variant, "strategy": strategy, "k": k, "n": part.height,
                     "a": part["a"].mean(), "b": part["b"].mean(), "difference": diff.value, "ci_lo": diff.lo,
                     "ci_hi": diff.hi})
    return pl.DataFrame(rows, schema={"suite": pl.String, "variant": pl.String, "strategy": pl.String,
                                      "k": pl.Int64, "n": pl.Int64, "a": pl.Float64, "b": pl.Float64,
                                      "difference": pl.Float64, "ci_lo": pl.Float64, "ci_hi": pl.Float64})

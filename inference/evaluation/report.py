"""The evaluation report: tables and figures (budget curves, length curves, robustness) of one or more models'
evaluations, as PNG files and one self-contained HTML page (figures embedded, so it opens anywhere).

Every figure is drawn from ``eval_item`` rows pooled over a suite's variants (one model and suite at a time), so a
suite evaluated at several lengths gives one length curve and one budget curve.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from inference.evaluation.summary import SAMPLE, length_bucket, summarize
from inference.metrics import bootstrap_ci
from inference.plotting import save_figure

STRATEGY_STYLE = {"single": ("#222222", "o"), "self_consistency": ("#4477aa", "s"),
                  "best_of_k": ("#aaaaaa", "^"), "heavy_thinking": ("#ee6677", "D")}
LINESTYLES = ("-", "--", ":", "-.")


def pooled(items: pl.DataFrame, breakdowns: Sequence[str], ks: Sequence[int], resamples: int = 1000) -> pl.DataFrame:
    """The summary of a suite's items over all its variants together (variant ``all``)."""
    return summarize(items.with_columns(pl.lit("all").alias("variant")), breakdowns, ks, resamples=resamples)


def budget_figure(summaries: Mapping[str, pl.DataFrame], suite: str, path: Path) -> Path | None:
    """Accuracy against mean generated tokens per item, one line per strategy (and model): the budget curves."""
    curves = []
    for (model, summary), style in zip(summaries.items(), LINESTYLES * 8, strict=False):
        overall = summary.filter((pl.col("group") == "all") & (pl.col("metric") == "accuracy")
                                 & pl.col("estimate").is_not_null())
        for strategy, (colour, marker) in STRATEGY_STYLE.items():
            curve = overall.filter(pl.col("strategy") == strategy).sort("k")
            if not curve.is_empty():
                label = f"{strategy} ({model})" if len(summaries) > 1 else strategy
                curves.append((curve, colour, marker, style, label))
    if not curves:
        return None
    with save_figure(path, figsize=(6.4, 4)) as (_, ax):
        for curve, colour, marker, style, label in curves:
            x, y = curve["tokens"].to_list(), curve["estimate"].to_list()
            err = [[e - lo for e, lo in zip(y, curve["ci_lo"], strict=True)],
                   [hi - e for e, hi in zip(y, curve["ci_hi"], strict=True)]]
            ax.errorbar(x, y, yerr=err, color=colour, marker=marker, linestyle=style, capsize=2, label=label)
            for xi, yi, k in zip(x, y, curve["k"], strict=True):
                ax.annotate(f"k={k}", (xi, yi), fontsize=6, textcoords="offset points", xytext=(3, 3))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("generated tokens per item (both stages)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{suite}: accuracy at matched budget")
        ax.legend(fontsize=7)
    return path


def length_figure(items_by_model: Mapping[str, pl.DataFrame], suite: str, path: Path) -> Path | None:
    """Avg@k of the plain samples against prompt length, one line per model and source (LoongRL's figures)."""
    lines = []
    for (model, items), style in zip(items_by_model.items(), LINESTYLES * 8, strict=False):
        rows = items.filter((pl.col("strategy") == SAMPLE) & (pl.col("status") == "scored") & ~pl.col("overlap")
                            & pl.col("score").is_not_null() & pl.col("length").is_not_null())
        for (source,), part in sorted(rows.group_by("source"), key=lambda g: str(g[0])):
            points = []
            for bucket, group in sorted(_buckets(part).items()):
                est = bootstrap_ci(group, resamples=500)
                points.append((bucket, est.value, est.lo, est.hi))
            if points:
                lines.append((points, style, f"{source} ({model})"))
    if not lines:
        return None
    with save_figure(path, figsize=(6.4, 4)) as (_, ax):
        for points, style, label in lines:
            x, y, lo, hi = zip(*points, strict=True)
            ax.errorbar(x, y, yerr=[[a - b for a, b in zip(y, lo, strict=True)],
                                    [b - a for a, b in zip(y, hi, strict=True)]],
                        marker="o", linestyle=style, capsize=2, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt tokens (bucket)")
        ax.set_ylabel("accuracy (Avg@k)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"{suite}: accuracy vs context length")
        ax.legend(fontsize=7)
    return path


def _buckets(frame: pl.DataFrame) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for length, score in frame.select("length", "score").iter_rows():
        out.setdefault(int(length_bucket(length) or 0), []).append(score)
    return out


def robustness_figure(summaries: Mapping[str, pl.DataFrame], path: Path) -> Path | None:
    """The robustness gap (clean minus noisy twin) per noise level and per transform, with intervals."""
    groups = ("noise_level", "noise_type")
    gaps = {(model, group): summary.filter((pl.col("metric") == "gap") & (pl.col("group") == group)
                                           & pl.col("estimate").is_not_null()).sort("value")
            for model, summary in summaries.items() for group in groups}
    if all(frame.is_empty() for frame in gaps.values()):
        return None
    width = 0.8 / max(1, len(summaries))
    with save_figure(path, 1, 2, figsize=(10, 4)) as (_, axes):
        for offset, model in enumerate(summaries):
            for ax, group in zip(axes, groups, strict=True):
                frame = gaps[model, group]
                if frame.is_empty():
                    continue
                x = [i + offset * width for i in range(frame.height)]
                y = frame["estimate"].to_list()
                ax.bar(x, y, width=width, label=model,
                       yerr=[[e - lo for e, lo in zip(y, frame["ci_lo"], strict=True)],
                             [hi - e for e, hi in zip(y, frame["ci_hi"], strict=True)]], capsize=2)
                ax.set_xticks([i + width * (len(summaries) - 1) / 2 for i in range(frame.height)])
                ax.set_xticklabels(frame["value"].to_list(), rotation=30, ha="right", fontsize=7)
                ax.set_title(f"gap per {group.replace('_', ' ')}")
                ax.set_ylabel("clean minus noisy success")
        axes[0].legend(fontsize=7)
    return path


# --- HTML -------------------------------------------------------------------------------------------------------------

TABLE_COLUMNS = ("variant", "strategy", "k", "metric", "group", "value", "n", "estimate", "ci_lo", "ci_hi", "tokens",
                 "n_overlap", "n_infra_errors", "failures")


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return html.escape("" if value is None else str(value))


def html_table(frame: pl.DataFrame, columns: Sequence[str] = TABLE_COLUMNS) -> str:
    columns = [c for c in columns if c in frame.columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(row[c])}</td>" for c in columns) + "</tr>"
                   for row in frame.iter_rows(named=True))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def headline(summary: pl.DataFrame) -> pl.DataFrame:
    """The rows people read first: every strategy and metric over all items."""
    return summary.filter(pl.col("group") == "all").sort("variant", "metric", "strategy", "k")


def _image(path: Path | None) -> str:
    if path is None:
        return ""
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f'<p><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{encoded}"></p>'


STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;font-size:12px;"
         "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f0f0f0}"
         "h2{border-bottom:1px solid #888}")


def write_report(sections: Sequence[Mapping[str, object]], title: str, path: Path) -> Path:
    """One HTML page: per section (``heading``, ``text``, ``tables``: list of frames, ``figures``: list of
    PNG paths), its text, figures and tables."""
    parts = [(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>")]
    for section in sections:
        parts.append(f"<h2>{html.escape(str(section['heading']))}</h2><p>{html.escape(str(section.get('text', '')))}</p>")
        parts += [_image(Path(p)) for p in section.get("figures", []) if p]  # type: ignore[union-attr]
        parts += [html_table(t) for t in section.get("tables", [])]  # type: ignore[union-attr]
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def markdown_table(frame: pl.DataFrame, columns: Sequence[str] = TABLE_COLUMNS) -> str:
    columns = [c for c in columns if c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in frame.iter_rows(named=True)]
    return "\n".join(lines)

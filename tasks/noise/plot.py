"""The noise-robustness plot: naive and robust reference success per level, one small panel per transform."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from inference.plotting import save_figure

SUMMARY_COLUMNS = ("transform", "level", "robust_success", "naive_success", "tasks")
ALL = "all"
"""The ``transform`` value of the rows that aggregate every task of a level."""


def plot_noise_success(frame: pl.DataFrame, path: str | Path) -> Path:
    """Write a PNG of ``frame`` (columns ``SUMMARY_COLUMNS``, one row per transform and level) to ``path``.

    The first panel aggregates all tasks of each level; the others show one transform each, so a transform that
    does not bite (naive stays at robust) and one that breaks solvability (robust below 1) both stand out.
    """
    missing = [c for c in SUMMARY_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"plot_noise_success: frame lacks columns {missing}; expected {list(SUMMARY_COLUMNS)}")
    if frame.is_empty():
        raise ValueError("plot_noise_success: the summary frame is empty; run the noise stage on some tasks first")

    transforms = sorted(set(frame["transform"].to_list()) - {ALL})
    panels = ([ALL] if ALL in frame["transform"].to_list() else []) + transforms
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    levels = sorted(set(frame["level"].to_list()))
    path = Path(path)
    with save_figure(path, rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=True) as (fig, axes):
        for ax, name in zip(axes.flat, panels):
            part = frame.filter(pl.col("transform") == name).sort("level")
            ax.plot(part["level"], part["robust_success"], marker="o", label="robust reference")
            ax.plot(part["level"], part["naive_success"], marker="s", linestyle="--", label="naive reference")
            if "naive_clean_success" in part.columns:  # the same tasks clean: the gap to it is the transform's bite
                ax.plot(part["level"], part["naive_clean_success"], color="grey", linestyle=":",
                        label="naive, clean twins")
            ax.set_title(f"{name} (n={int(part['tasks'].sum())})", fontsize=9)
            ax.set_xticks(levels)
            ax.set_ylim(-0.05, 1.05)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("success")
        for ax in list(axes.flat)[max(0, len(panels) - cols):len(panels)]:
            ax.set_xlabel("noise level")
        axes.flat[0].legend(fontsize=8, loc="lower left")
        fig.suptitle("Solvability under noise: reference-agent success per level and transform", fontsize=10)
    return path

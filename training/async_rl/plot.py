"""The figure of one or more RL runs: reward against trained samples, the staleness histogram of the trained
samples, and throughput over time (the train-rl flow's Prefect artifact; bench_rl's async-vs-sync comparison)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from inference.plotting import save_figure


def plot_runs(runs: Mapping[str, tuple[pl.DataFrame, pl.DataFrame]], path: Path, title: str = "") -> Path:
    """``runs``: name -> (``steps``, ``samples``) frames of the rl_step and rl_sample records; writes a PNG."""
    width = 0.8 / max(1, len(runs))
    with save_figure(path, 1, 3, figsize=(12, 3.5)) as (fig, (reward, staleness, speed)):
        for i, (name, (steps, samples)) in enumerate(runs.items()):
            reward.plot(steps["trained_samples"].cum_sum().to_list(), steps["reward_mean"].to_list(), marker=".",
                        label=name)
            counts = Counter(samples.filter(pl.col("trained"))["staleness"].to_list())
            staleness.bar([s - 0.4 + width * (i + 0.5) for s in sorted(counts)], [counts[s] for s in sorted(counts)],
                          width=width, label=name)
            speed.plot(steps["wall_s"].to_list(), steps["samples_per_s"].to_list(), marker=".", label=name)
        reward.set_xlabel("trained samples")
        reward.set_ylabel("mean reward of a step's samples")
        staleness.set_xlabel("staleness (versions behind the trainer)")
        staleness.set_ylabel("trained samples")
        speed.set_xlabel("seconds")
        speed.set_ylabel("trained samples / s (cumulative)")
        for ax in (reward, staleness, speed):
            ax.legend()
        if title:
            fig.suptitle(title)
    return path

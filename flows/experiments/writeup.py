"""An experiment's write-up: the table of every metric with its intervals, the learning curves (PNG), the conclusion
the numbers support and nothing more, and the runs with their artifacts (their lineage is in the catalog)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from flows.experiments.core import Result
from flows.experiments.stats import Comparison
from inference.metrics import Estimate
from inference.plotting import save_figure

CURVE_LABELS = {"reward": ("trained samples", "training reward (mean of the step's batch)"),
                "loss": ("step", "training loss")}


def conclusion(result: Result) -> str:
    """What the primary comparisons support, stated against the report's direction."""
    experiment = result.experiment
    metric = experiment.statistics.metrics[0]
    lines = []
    for c in result.primary:
        level = f"{1 - c.alpha:.0%}"
        if c.significant:
            lines.append(f"- **{c.verdict}** on {metric}: difference {c.difference.value:+.3f}, {level} interval "
                         f"[{c.difference.lo:+.3f}, {c.difference.hi:+.3f}] excludes 0 (p = {c.p_value:.3f}).")
        else:
            half = (c.difference.hi - c.difference.lo) / 2
            lines.append(f"- **No difference detected** between {c.a} and {c.b} on {metric}: "
                         f"{c.difference.value:+.3f}, {level} interval [{c.difference.lo:+.3f}, "
                         f"{c.difference.hi:+.3f}] includes 0 (p = {c.p_value:.3f}); at this budget an effect "
                         f"smaller than about ±{half:.3f} cannot be told from noise.")
    if experiment.equivalence:
        verdict = ("Contradicted: the arms differ." if any(c.significant for c in result.primary) else
                   "Consistent (no significant difference), as far as the interval's width allows.")
    else:
        verdict = ("Reproduced." if all(c.significant and c.difference.value > 0 for c in result.primary) else
                   "Reversed at this scale." if any(c.significant and c.difference.value < 0 for c in result.primary)
                   else "Not reproduced at this budget (no significant difference).")
    lines.append(f"- The report's direction: {experiment.expected}. {verdict}")
    return "\n".join(lines)


def _row(metric: str, group: str, c: Comparison) -> str:
    return (f"| {metric} | {group} | {c.a} − {c.b} | {_interval(c.a_score)} | {_interval(c.b_score)} | {c.difference.value:+.3f} "
            f"[{c.difference.lo:+.3f}, {c.difference.hi:+.3f}] | {c.p_value:.3f} | {c.units} | "
            f"{c.seeds[0]}+{c.seeds[1]} |")


def markdown(result: Result, figure: Path | None = None) -> str:
    e = result.experiment
    stats = e.statistics
    lines = [f"# Experiment {e.name}: {e.title}", "", f"**Claim replayed:** {e.claim}", "",
             (f"Profile `{result.profile}`, budget `{e.budget}`, {result.seeds} seed(s) per arm, wall time "
              f"{result.wall_s / 60:.1f} min. Test: {stats.test.replace('_', ' ')}, {stats.confidence:.0%} intervals, "
              f"{stats.resamples} resamples."),
             "", "| arm | trains on | trainer | overrides |", "|---|---|---|---|"]
    budget = e.trainer_budget
    for name, arm in e.arms.items():
        lines.append(f"| {name} | {', '.join(arm.train_on)} — {arm.description} | {arm.trainer} | "
                     f"`{ {**budget, **arm.train} }` |")
    lines += ["", "## Results", "", ("| metric | held-out group | arms | a [CI] | b [CI] | a − b [CI] | p | units | "
              "seeds |"), "|---|---|---|---|---|---|---|---|---|"]
    for (metric, group), comparisons in result.comparisons.items():
        for c in comparisons:
            lines.append(_row(metric + (f"@{stats.pass_k}" if metric == "pass_at_k" else ""), group, c))
    if result.base:
        lines += ["", "The base model before training, on the same held-out units (interval over units):", "",
                  "| metric | held-out group | base model |", "|---|---|---|"]
        lines += [f"| {metric} | {group} | {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] |"
                  for (metric, group), e in result.base.items()]
    if result.priors:
        lines += ["", ("Prior-only baselines: the expected reward of answering from the training answers alone, "
                       "without reading (flows/experiments/priors.py); an arm below them learned nothing beyond the "
                       "answer distribution:"), "", "| baseline | metric | held-out group | expected reward |",
                  "|---|---|---|---|"]
        lines += [f"| {label} | {metric} | {group} | {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] |"
                  for label, estimates in result.priors.items() for (metric, group), e in estimates.items()]
    lines += ["", "## Conclusion", "", conclusion(result), ""]
    if figure is not None:
        lines += [f"![learning curves]({figure.name})", ""]
    lines += ["## Runs", "", "| arm | seed | wall s | artifacts |", "|---|---|---|---|"]
    for run in result.runs:
        lines.append(f"| {run.arm} | {run.seed} | {run.wall_s:.0f} | "
                     + ", ".join(f"{k} `{v}`" for k, v in run.artifacts.items()) + " |")
    if e.notes:
        lines += ["", "## Notes", "", e.notes]
    return "\n".join(lines) + "\n"


def curves_figure(result: Result, path: Path) -> Path | None:
    """Each arm's learning curve, the mean over seeds with the seeds' range shaded; None when no run has one."""
    runs = [r for r in result.runs if not r.curve.is_empty()]
    if not runs:
        return None
    xlabel, ylabel = CURVE_LABELS[result.experiment.curve]
    with save_figure(path, figsize=(6.5, 3.8)) as (_, ax):
        for i, arm in enumerate(result.experiment.arms):
            curves = [r.curve.with_columns(pl.lit(r.seed).alias("seed")) for r in runs if r.arm == arm]
            if not curves:
                continue
            frame = pl.concat(curves).group_by("x").agg(pl.col("y").mean().alias("mean"), pl.col("y").min().alias(
                "lo"), pl.col("y").max().alias("hi")).sort("x")
            colour = f"C{i}"
            ax.plot(frame["x"].to_list(), frame["mean"].to_list(), color=colour, label=f"{arm} ({len(curves)} seeds)")
            ax.fill_between(frame["x"].to_list(), frame["lo"].to_list(), frame["hi"].to_list(), color=colour,
                            alpha=0.2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{result.experiment.name} ({result.profile}, {result.experiment.budget} budget)")
        ax.legend()
    return path


def write(result: Result, directory: Path, stem: str) -> tuple[Path, str]:
    """The page ``<directory>/<stem>.md`` with its figure beside it; returns the page and its Markdown."""
    figure = curves_figure(result, directory / f"{stem}.png")
    text = markdown(result, figure)
    directory.mkdir(parents=True, exist_ok=True)
    page = directory / f"{stem}.md"
    page.write_text(text, encoding="utf-8")
    return page, text


def _interval(e: Estimate) -> str:
    return f"{e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}]"

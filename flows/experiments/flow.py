"""The `experiment` flow: a declared experiment run end to end on a data root, every arm at every seed a Prefect
task in this process (training never runs inside a Dask worker, DESIGN.md section 4), every artifact an ordinary
catalog entry with its lineage, and the write-up as a Prefect artifact and a Markdown page (with its learning-curve
PNG and the scores as Parquet) under ``<data root>/experiments/<name>/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from data_contracts.roots import data_root
from flows.experiments import writeup
from flows.experiments.config import Experiment
from flows.experiments.core import ArmRun, Result, run_experiment
from flows.experiments.declared import get_experiment
from flows.experiments.executor import PipelineExecutor
from flows.failures import fails_cleanly
from flows.figures import figure_markdown
from flows.live import live_progress
from inference.progress import RunProgress


@task(task_run_name="{arm}/seed {seed}", cache_policy=NO_CACHE)  # the artifact store is the cache
def arm_task(executor: PipelineExecutor, experiment: Experiment, arm: str, seed: int, profile: str) -> ArmRun:
    return executor.run(experiment, arm, seed, profile)


@task(task_run_name="base model", cache_policy=NO_CACHE)
def base_task(executor: PipelineExecutor, experiment: Experiment, profile: str) -> pl.DataFrame:
    return executor.score_base(experiment, profile)


@task(task_run_name="prior-only baselines", cache_policy=NO_CACHE)
def priors_task(executor: PipelineExecutor, experiment: Experiment, profile: str) -> dict[str, pl.DataFrame]:
    return executor.priors(experiment, profile)


class _TaskExecutor:
    """Each arm run a Prefect task of the flow run (its state, timing and logs in the UI)."""

    def __init__(self, inner: PipelineExecutor) -> None:
        self.inner = inner

    def run(self, experiment: Experiment, arm: str, seed: int, profile: str) -> ArmRun:
        return arm_task(self.inner, experiment, arm, seed, profile)

    def score_base(self, experiment: Experiment, profile: str) -> pl.DataFrame:
        return base_task(self.inner, experiment, profile)

    def priors(self, experiment: Experiment, profile: str) -> dict[str, pl.DataFrame]:
        return priors_task(self.inner, experiment, profile)


def configured(name: str, budget: str = "default", base: str | None = None) -> Experiment:
    """A declared experiment under a budget, from the declared base or ``base``."""
    experiment = get_experiment(name).with_budget(budget)
    return experiment.with_base(base) if base else experiment


def page_stem(experiment: Experiment, profile: str, seeds: int) -> str:
    """NAME-PROFILE-BUDGET[-BASE]-Nseeds: a local base model (a real model) names its directory."""
    directory = experiment.base.directory
    tag = f"-{directory.name}" if directory else ""
    return f"{experiment.name}-{Path(profile).stem}-{experiment.budget}{tag}-{seeds}seeds"


def publish(result: Result, root: Path) -> dict[str, Any]:
    """The page, the figure and the scores under the data root; the same write-up as Prefect artifacts."""
    directory = root / "experiments" / result.experiment.name
    stem = page_stem(result.experiment, result.profile, result.seeds)
    page, text = writeup.write(result, directory, stem)
    pl.concat([r.scores.with_columns(pl.lit(r.arm).alias("arm"), pl.lit(r.seed).alias("seed"))
               for r in result.runs]).write_parquet(directory / f"{stem}.scores.parquet")
    slug = result.experiment.name.replace("_", "-")
    create_markdown_artifact(markdown=text, key=f"experiment-{slug}",
                             description=f"experiment {result.experiment.name}: table, conclusion, runs")
    figure = directory / f"{stem}.png"
    if figure.is_file():
        create_markdown_artifact(markdown=figure_markdown(figure, f"{result.experiment.name} learning curves"),
                                 key=f"experiment-{slug}-curves")
    create_table_artifact(key=f"experiment-{slug}-comparisons", table=[
        {"metric": metric, "group": group, "a": c.a, "b": c.b, "a_score": round(c.a_score.value, 4),
         "b_score": round(c.b_score.value, 4), "difference": round(c.difference.value, 4),
         "ci_lo": round(c.difference.lo, 4), "ci_hi": round(c.difference.hi, 4), "p": round(c.p_value, 4)}
        for (metric, group), comparisons in result.comparisons.items() for c in comparisons])
    return {"page": str(page), "conclusion": writeup.conclusion(result), "wall_s": result.wall_s,
            "runs": len(result.runs)}


def _run_name() -> str:
    from prefect.runtime import flow_run

    parameters = flow_run.parameters
    return (f"experiment {parameters.get('name')} {Path(str(parameters.get('profile', 'tiny'))).stem} "
            f"{parameters.get('budget', 'default')}")


@flow(name="experiment", flow_run_name=_run_name)
@fails_cleanly
def experiment_flow(name: str, profile: str = "tiny", budget: str = "default", base: str | None = None,
                    seeds: int | None = None, data_dir: str | None = None) -> dict[str, Any]:
    """Run a declared experiment: every arm at seeds 0..seeds-1 (data, training, held-out scoring as artifacts),
    then the declared comparisons with their intervals; publishes the write-up.

    Args:
        name: a declared experiment (`gymforge experiment ls`).
        profile: tiny | small | default | full, or a path to a profile YAML: the stages' params and trainer configs.
        budget: the experiment's training budget on top of the profile (smoke | default | profile).
        base: the model every arm starts from instead of the declared base and its cold start (a model stage or a
            local transformers directory).
        seeds: training seeds per arm; none means the experiment's own.
        data_dir: data root; none means $GYMFORGE_DATA, else ./data.
    """
    from prefect.runtime import flow_run

    logger = get_run_logger()
    experiment = configured(name, budget, base)
    root = data_root(data_dir)
    executor = PipelineExecutor(root, flow_run_id=flow_run.id)
    executor.check(experiment, profile)
    executor.store.clean_partial()  # a killed run's scratch space
    home = Path(executor.store.home)

    def on_seed(partial: Result) -> None:  # the page of the seeds so far, e.g. NAME-tiny-default-1seeds.md
        writeup.write(partial, home / "experiments" / name, page_stem(experiment, profile, partial.seeds))

    def on_run(run: ArmRun) -> None:
        logger.info("%s seed %d: %s (%.0f s)", run.arm, run.seed, run.artifacts, run.wall_s)
        progress.update(progress.completed + 1, {"arm": run.arm, "seed": run.seed,
                                                 "held-out reward": float(run.scores["reward"].mean()),
                                                 "run s": run.wall_s})

    runs = (seeds or experiment.seeds) * len(experiment.arms)
    with live_progress(), RunProgress("experiment", runs, unit="run", label=f"experiment {name}") as progress:
        result = run_experiment(experiment, _TaskExecutor(executor), profile=profile, seeds=seeds, on_run=on_run,
                                on_seed=on_seed)
    summary = publish(result, home)
    logger.info("experiment %s: %s", name, summary["conclusion"])
    return summary

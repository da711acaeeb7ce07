"""`gymforge experiment`: the declared experiments (flows/experiments/declared.py), each run by one command as the
`experiment` Prefect flow in this process on the data root's Prefect server (no Dask cluster: training never runs
inside a Dask worker)."""

from __future__ import annotations

from typing import Annotated

import typer

experiment_app = typer.Typer(no_args_is_help=True, help="Declared experiments that replay the reports' comparisons "
                                                        "(arms, seeds, held-out scores, intervals).")


@experiment_app.command("ls")
def ls() -> None:
    """The declared experiments: name, arms, trainer, primary metric, seeds and the claim each replays."""
    from rich.table import Table

    from flows.experiments.declared import EXPERIMENTS
    from flows.terminal import print_table, stdout_console

    table = Table("name", "arms", "trainer", "primary metric", "seeds", "claim")
    for e in EXPERIMENTS.values():
        trainers = sorted({arm.trainer for arm in e.arms.values()})
        table.add_row(e.name, ", ".join(e.arms), ", ".join(trainers), e.statistics.metrics[0], str(e.seeds), e.claim)
    print_table(stdout_console(), table)


@experiment_app.command("run")
def run(
    name: Annotated[str, typer.Argument(help="A declared experiment (`gymforge experiment ls`).")],
    profile: Annotated[str, typer.Option(help="tiny | small | default | full, or a profile YAML: the stages' params and "
                                              "trainer configs.")] = "tiny",
    budget: Annotated[str, typer.Option(help="The experiment's training budget on top of the profile: smoke (a "
                                             "few minutes), default (under an hour per experiment on 2 cores at "
                                             "the tiny profile) or profile (the profile's own trainer config).")
                      ] = "default",
    base: Annotated[str | None, typer.Option(help="The model every arm starts from, instead of the declared base "
                                                  "and its cold start: a local transformers directory (a real "
                                                  "model) or a model stage.")] = None,
    seeds: Annotated[int | None, typer.Option(min=1, max=32, help="Training seeds per arm (default: the "
                                                                  "experiment's).")] = None,
) -> None:
    """Run experiment NAME: every arm at every seed (data, training, held-out scores as catalog artifacts), the
    comparisons with their intervals; prints the conclusion and the report's path."""
    from rich.console import Console

    from data_contracts.roots import data_root
    from flows.experiments.executor import PipelineExecutor
    from flows.experiments.flow import configured, experiment_flow
    from flows.runtime import Runtime

    PipelineExecutor(data_root(None)).check(configured(name, budget, base), profile)  # before a server starts
    with Runtime(dask=False) as rt:
        Console(stderr=True).print(f"Prefect UI: {rt.ui_url}")
        result = experiment_flow(name=name, profile=profile, budget=budget, base=base, seeds=seeds,
                                 data_dir=str(rt.root))
    console = Console()
    console.print(result["conclusion"])
    console.print(f"report: {result['page']} ({result['runs']} runs, {result['wall_s'] / 60:.1f} min)")


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""
    app.add_typer(experiment_app, name="experiment")

"""`gymforge eval`: the evaluate flow run in this process on the data root's Prefect server (no Dask cluster: the
model runs here, never inside a Dask worker), the comparison of two models' evaluations, and the suites."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

eval_app = typer.Typer(no_args_is_help=True, help="Evaluation: suites, strategies (Heavy Thinking, self-consistency, "
                                                  "best-of-k) at matched budgets, robustness, comparisons.")

HEADLINE = ("variant", "strategy", "k", "metric", "n", "estimate", "ci_lo", "ci_hi", "tokens", "n_overlap",
            "n_infra_errors")


def _suites(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


@eval_app.command("run")
def run(
    model: Annotated[str, typer.Option(help="A model artifact key (or a stage with one published model), or an "
                                            "engine spec: openai:URL#MODEL, hf:DIR, vllm:DIR.")],
    suites: Annotated[str, typer.Option(help="Comma-separated suites: keychain, needles, qa, math, noise, "
                                             "random_tasks, context.")],
    profile: Annotated[str, typer.Option(help="Profile whose `evaluate` section configures the run.")] = "tiny",
    settings: Annotated[list[str] | None, typer.Option("--set", help="Evaluate param override name=value (YAML "
                                                                     "values: --set ks=[1,2,4]); repeatable.")] = None,
    partition: Annotated[str, typer.Option(help="Partition the suites' upstream data comes from.")] = "default",
) -> None:
    """Evaluate MODEL on SUITES: one evaluation artifact per suite variant, an HTML report, a table per suite."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from flows.cli.train import parse_settings
    from flows.evaluate_model import check, evaluate_model
    from flows.runtime import Runtime
    from flows.terminal import print_table, stdout_console

    names = _suites(suites)
    overrides = parse_settings(settings or [])
    ref = check(model, names, profile=profile, overrides=overrides)  # fail early: suites, params, the model
    with Runtime(dask=False) as rt:
        Console(stderr=True).print(f"Prefect UI: {rt.ui_url}")
        result = evaluate_model(model=model, suites=names, profile=profile, overrides=overrides or None,
                          partition=partition, data_dir=str(rt.root), progress=True)
    console = stdout_console()
    for evaluation in result["evaluations"]:
        table = Table(title=escape(f"{evaluation['suite']} [{evaluation['variant']}] {evaluation['key']} "
                                   f"({'cached' if evaluation['cached'] else 'published'})"))
        for column in HEADLINE:
            table.add_column(column)
        for row in evaluation["headline"]:
            if row["metric"] in ("accuracy", "avg@k", "gap", "sc_at_budget", "ht_minus_sc_at_budget"):
                table.add_row(*(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in HEADLINE))
        print_table(console, table)
        if evaluation["overlap"]:
            console.print(f"[yellow]{evaluation['overlap']} item(s) of {evaluation['suite']} appear in "
                          f"{ref.label}'s training data: flagged and left out of the figures[/yellow]")
    console.print(f"report: {result['report']}")


@eval_app.command("compare")
def compare(
    a: Annotated[str, typer.Argument(help="Model A: a model artifact key or engine spec, or an evaluation key.")],
    b: Annotated[str, typer.Argument(help="Model B, the same way.")],
    html: Annotated[Path | None, typer.Option(help="Also write an HTML report of both models here.")] = None,
) -> None:
    """B minus A on every suite variant, strategy and width both were evaluated on: paired per item, with a
    bootstrap interval."""
    from rich.table import Table

    from flows.evaluate_model import compare_models
    from flows.terminal import print_table, stdout_console

    label_a, label_b, frame = compare_models(a, b, html=html)
    table = Table(title=f"B - A   (A: {label_a}, B: {label_b})")
    for column in frame.columns:
        table.add_column(column)
    for row in frame.iter_rows():
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
    console = stdout_console()
    print_table(console, table)
    if html is not None:
        console.print(f"report: {html}")


@eval_app.command("suites")
def list_suites() -> None:
    """The suites and what each evaluates."""
    from rich.table import Table

    from flows.terminal import print_table, stdout_console
    from inference.evaluation.suites import SUITES

    table = Table()
    for column in ("suite", "data", "what it measures"):
        table.add_column(column)
    for suite in SUITES.values():
        table.add_row(suite.name, ", ".join(suite.stages), suite.description)
    print_table(stdout_console(), table)


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""
    app.add_typer(eval_app, name="eval")

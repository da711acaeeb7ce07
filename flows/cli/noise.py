"""`gymforge` commands of the noise room: noisy twins of environment bundles, with their solvability report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.data import require_new_dir

SUMMARY_KEYS = ("transform", "level", "robust_success", "naive_success", "tasks")


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""

    @app.command("noise")
    def noise(
        envs: Annotated[Path, typer.Option(help="Directory of environment bundles (gymforge envgen generate --out).")],
        level: Annotated[int, typer.Option(help="Noise level K of the twins, 1..max-level.")],
        out: Annotated[Path, typer.Option(help="New directory for the noisy bundles, rejected twins, summary, plot.")],
        max_level: Annotated[int, typer.Option(help="Highest curriculum level L.")] = 4,
        seed: Annotated[int, typer.Option(help="Root seed of every noise choice.")] = 0,
        max_tasks: Annotated[int | None, typer.Option(help="Use at most this many tasks per bundle.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    ) -> None:
        """Write noisy twins of every task at LEVEL, verified solvable by the robust reference agent, and print the
        robust and naive reference success per transform and level (level 0: the clean tasks)."""
        from data_contracts.stage import StageError
        from envgen.bundle import BundleError
        from tasks.noise.noisy_tasks import noisy_tasks, twin_bundles

        require_new_dir(out)
        try:
            params = noisy_tasks.parse_params({"levels": [level], "max_level": max_level, "seed": seed,
                                               "max_tasks": max_tasks})
            kept, rejected, summary = twin_bundles(envs, out, params)
        except (StageError, BundleError) as exc:
            raise typer.BadParameter(str(exc)) from None
        if as_json:
            typer.echo(json.dumps([{k: row[k] for k in SUMMARY_KEYS} for row in summary.to_dicts()]))
            return
        from rich.table import Table

        table = Table(title=f"Noisy twins at level {level}: {kept.height} kept, {rejected.height} rejected -> {out}")
        for column in ("transform", "level", "robust", "naive", "naive (clean twins)", "tasks"):
            table.add_column(column, justify="left" if column == "transform" else "right")
        for row in summary.iter_rows(named=True):
            table.add_row(row["transform"], str(row["level"]), f"{row['robust_success']:.2f}",
                          f"{row['naive_success']:.2f}", f"{row['naive_clean_success']:.2f}", str(row["tasks"]))
        from flows.terminal import print_table, stdout_console

        print_table(stdout_console(), table)

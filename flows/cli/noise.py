"""`gymforge` commands of the noise room: noisy twins of environment bundles, with their solvability report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from data_contracts.files import atomic_dir
from flows.cli.data import require_new_dir

SUMMARY_KEYS = ("transform", "level", "robust_success", "naive_success", "tasks")
TASK_FIELDS = ("task_id", "env_id", "description", "user_profile", "rubric", "golden_actions")


def load_bundles(root: Path) -> list[tuple[Path, dict[str, Any], list[dict[str, Any]]]]:
    """Every bundle under ``root`` (envgen.bundle's format) as (path, environment record, task records); a bad
    bundle is a clear error naming its file (and line)."""
    from envgen.bundle import BundleError, bundle_dirs, read_bundle

    if not root.is_dir():
        raise typer.BadParameter(f"{root} is not a directory of environment bundles (gymforge envgen --out)")
    loaded = []
    try:
        for path in bundle_dirs(root):
            env, tasks = read_bundle(path)
            for n, task in enumerate(tasks, start=1):
                missing = [k for k in TASK_FIELDS if k not in task]
                if missing:
                    raise BundleError(f"{path / 'tasks.jsonl'}:{n}: task lacks field(s) {missing}")
            loaded.append((path, env, tasks))
    except BundleError as exc:
        raise typer.BadParameter(str(exc)) from None
    return loaded


def write_noisy_bundle(source: Path, target: Path, tasks: list[dict[str, Any]]) -> None:
    """A bundle of the noisy twins: the source bundle's files, with tasks.jsonl holding the twins (JSON fields
    decoded, keys sorted, as envgen.bundle writes them)."""
    from envgen.bundle import TASK_JSON_FIELDS, tasks_jsonl

    target.mkdir(parents=True)
    for f in source.iterdir():
        if f.is_file() and f.name != "tasks.jsonl":
            shutil.copyfile(f, target / f.name)
    (target / "tasks.jsonl").write_text(tasks_jsonl(tasks, (*TASK_JSON_FIELDS, "naive_by_transform")))


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
        import polars as pl

        from data_contracts.gate import validate
        from data_contracts.stage import REJECTED, FrameArtifact, StageError
        from envgen.noise.plot import plot_noise_success
        from envgen.noise.solvability import summary_frame
        from tasks.noise.noisy_tasks import noisy_tasks

        require_new_dir(out)
        try:
            params = noisy_tasks.parse_params({"levels": [level], "max_level": max_level, "seed": seed,
                                               "max_tasks": max_tasks})
        except StageError as exc:
            raise typer.BadParameter(str(exc)) from None
        kept_all, rejected_all = [], []
        with atomic_dir(out) as tmp:
            for bundle, env, tasks in load_bundles(envs):
                artifact = FrameArtifact({"environments": pl.DataFrame([env]), "tasks": pl.DataFrame(tasks)})
                result = noisy_tasks.run({"environments": artifact}, params, bundle.name)
                for name, contract in noisy_tasks.outputs.items():
                    report = validate("noisy_tasks", name, result[name], contract, bundle.name)
                    if not report.passed:
                        raise typer.BadParameter(f"bundle {bundle}: noisy {name} failed its contract: {report}")
                write_noisy_bundle(bundle, tmp / bundle.name, result["tasks"].to_dicts())
                kept_all.append(result["tasks"])
                rejected_all.append(result[REJECTED])
            kept = pl.concat(kept_all, how="diagonal_relaxed")
            rejected = pl.concat(rejected_all, how="diagonal_relaxed")
            rejected.write_ndjson(tmp / "rejected.jsonl")
            summary = summary_frame(kept, rejected)
            (tmp / "summary.json").write_text(json.dumps(summary.to_dicts(), indent=2))
            plot_noise_success(summary, tmp / "noise_success.png")
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

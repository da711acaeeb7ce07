"""`gymforge train`: the training flows, run in this process on the data root's Prefect server (no Dask cluster:
training never runs inside a Dask worker). `gymforge deploy` puts the same flows on the `gpu` work pool."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

train_app = typer.Typer(no_args_is_help=True, help="Training flows: cold-start SFT, asynchronous RL.")


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """``--set name=value`` pairs, values read as YAML scalars (1e-3, true, 64); a dotted name sets a nested field
    (``--set sampling.max_tokens=32``), as `gymforge params STAGE` lists them."""
    import yaml

    out: dict[str, Any] = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        path = [part.strip() for part in name.split(".")]
        if not sep or not all(path):
            raise typer.BadParameter(f"{setting!r}: write name=value, e.g. learning_rate=1e-3", param_hint="--set")
        section = out
        for part in path[:-1]:
            section = section.setdefault(part, {})
            if not isinstance(section, dict):
                raise typer.BadParameter(f"{setting!r}: {part} is set to a value already", param_hint="--set")
        section[path[-1]] = yaml.safe_load(value)
    return out


AllowUntrained = Annotated[bool, typer.Option("--allow-untrained", help="Publish a run that trained nothing (no "
                                                                        "sample trained, or a model equal to its "
                                                                        "base) instead of failing.")]


def run_overrides(settings: list[str] | None, allow_untrained: bool, **options: Any) -> dict[str, Any]:
    """``--set`` pairs plus the dedicated options that were given (they name the same config fields)."""
    overrides = parse_settings(settings or [])
    overrides.update({name: value for name, value in options.items() if value is not None})
    if allow_untrained:
        overrides["allow_untrained"] = True
    return overrides


@train_app.command("sft")
def sft(
    data: Annotated[list[str], typer.Option(help="Trajectory artifact to train on: a key, or a stage with one "
                                                 "published artifact (sft_set, small_envs); repeat for several.")],
    base: Annotated[str, typer.Option(help="Base model: a model artifact key (`gymforge artifacts ls --kind model`), "
                                           "or a local transformers directory (a Hugging Face checkpoint, or "
                                           "`gymforge model init`).")],
    profile: Annotated[str, typer.Option(help="Profile whose `sft` section configures the run.")] = "tiny",
    resume: Annotated[bool, typer.Option(help="Continue a killed run from its last complete checkpoint.")] = False,
    settings: Annotated[list[str] | None, typer.Option("--set", help="Config override name=value (TRL's names, "
                                                                     "e.g. --set max_steps=200); repeatable; "
                                                                     "`gymforge params sft` lists them.")] = None,
    chat_template: Annotated[str | None, typer.Option(help="auto (default: the base's template when it marks "
                                                           "assistant turns with {% generation %}, else a training "
                                                           "template), keep, gymforge, or a Jinja file.")] = None,
    report_to: Annotated[str | None, typer.Option(help="Also report to, as TRL's report_to: tensorboard (files "
                                                       "under <data root>/tensorboard/sft/KEY), wandb...")] = None,
    allow_untrained: AllowUntrained = False,
    partition: Annotated[str, typer.Option(help="Partition to record the run under.")] = "default",
) -> None:
    """Cold-start SFT (TRL SFTTrainer) of BASE on trajectory artifacts, published as a model artifact; prints the
    held-out evaluation before and after."""
    from rich.console import Console

    from flows.runtime import Runtime
    from flows.train import plan_sft, train_sft

    overrides = run_overrides(settings, allow_untrained, chat_template=chat_template, report_to=report_to)
    planned = plan_sft(data, base, profile=profile, overrides=overrides, resume=resume, partition=partition)
    stderr = Console(stderr=True, highlight=False)
    for note in planned.notes:  # said before the run starts: what it does differently from what was asked
        stderr.print(note, markup=False)
    with Runtime(dask=False) as rt:
        stderr.print(f"Prefect UI: {rt.ui_url}")
        result = train_sft(data=list(data), base=base, profile=profile, overrides=overrides or None,
                           resume=resume, partition=partition, data_dir=str(rt.root))
    print_result(result)


def print_result(result: dict[str, Any]) -> None:
    """The run in one line, the held-out evaluation before and after as a table, and how to serve the model."""
    from rich.table import Table

    from flows.terminal import print_table, stdout_console

    console = stdout_console()
    status = "cached" if result["cached"] else "published"
    console.print(f"sft {result['key']} {status}: {result['steps']} steps on {result['examples']} examples "
                  f"(final loss {result['final_loss']:.4f}, {result['rejected']} set aside) -> {result['model']}")
    if result["evaluation"]:
        table = Table(title="held-out evaluation")
        for column in result["evaluation"][0]:
            table.add_column(column, justify="left" if column == "figure" else "right")
        for row in result["evaluation"]:
            table.add_row(*(str(value) for value in row.values()))
        print_table(console, table)
    console.print(f"serve it: gymforge serve --model {result['key']}")


@train_app.command("rl")
def rl(
    base: Annotated[str, typer.Option("--from", help="Model to start from: a model artifact key (an SFT checkpoint, "
                                                     "`gymforge artifacts ls --kind model`) or a local directory.")],
    tasks: Annotated[str, typer.Option(help="Task artifacts, comma-separated: keys, or stages with one published "
                                            "artifact (small_envs,keychain; rl_mix; noisy_tasks,environments).")],
    profile: Annotated[str, typer.Option(help="Profile whose `rl` section configures the run.")] = "tiny",
    resume: Annotated[bool, typer.Option(help="Continue a killed run from its last checkpoint.")] = False,
    settings: Annotated[list[str] | None, typer.Option("--set", help="Config override name=value (e.g. --set "
                                                                     "steps=40 --set max_staleness=1); repeatable; "
                                                                     "`gymforge params rl` lists them.")] = None,
    engine: Annotated[str | None, typer.Option(help="The controllers' engine, e.g. openai:URL#MODEL for vLLM "
                                                    "servers (default: the model itself in each controller).")] = None,
    report_to: Annotated[str | None, typer.Option(help="Also report each step's figures to tensorboard (files "
                                                       "under <data root>/tensorboard/rl/KEY).")] = None,
    allow_untrained: AllowUntrained = False,
    partition: Annotated[str, typer.Option(help="Partition to record the run under.")] = "default",
) -> None:
    """Asynchronous RL (GRPO/GSPO with bounded staleness) of a model on task artifacts, published as a model
    artifact; shows version, reward, queue depth, staleness and samples/s as it trains. Controllers run in local
    processes, or on the Dask cluster of the global --dask-address."""
    import os

    from rich.console import Console

    from flows.runtime import DASK_ENV, Runtime
    from flows.terminal import stdout_console
    from flows.train import plan_rl, train_rl

    overrides = run_overrides(settings, allow_untrained, report_to=report_to)
    names = [name.strip() for name in tasks.split(",") if name.strip()]
    dask_address = os.environ.get(DASK_ENV) or None
    plan_rl(names, base, profile=profile, overrides=overrides, resume=resume, partition=partition, engine=engine,
            dask_address=dask_address)  # fail early
    with Runtime(dask=False) as rt:
        Console(stderr=True).print(f"Prefect UI: {rt.ui_url}")
        result = train_rl(tasks=names, base=base, profile=profile, overrides=overrides or None, resume=resume,
                          partition=partition, data_dir=str(rt.root), engine=engine, dask_address=dask_address)
    status = "cached" if result["cached"] else "published"
    dropped = ", ".join(f"{n} {reason}" for reason, n in result["dropped"].items()) or "none"
    console = stdout_console()
    console.print(f"rl {result['key']} {status}: {result['steps']} steps, {result['trained_samples']} of "
                  f"{result['consumed_samples']} consumed samples trained; reward {result['reward_first']:.3f} -> "
                  f"{result['reward_last']:.3f} (mean of the first and last steps); staleness of the consumed "
                  f"samples mean {result['staleness_mean']:.2f}, max {result['staleness_max']}; "
                  f"{result['samples_per_s']:.2f} trained samples/s, engine load {result['engine_load']:.0%}; "
                  f"{_on_policy(result['ratio_on_policy'])}"
                  f"dropped: {dropped} -> {result['model']}")
    console.print(f"serve it: gymforge serve --model {result['key']}")


def _on_policy(ratio: float | None) -> str:
    """The on-policy token ratio (trainer over engine at staleness 0): 1 when both score the same distribution."""
    return "no on-policy sample; " if ratio is None else f"on-policy ratio {ratio:.4f}; "


DEMO_DATA = ("small_envs", "sft_set")  # golden trajectories of one shape teach the call syntax soonest (RESULTS.md)
DEMO_BASE = "tiny_policy"
DEMO_SFT = {"max_steps": 200, "learning_rate": 3e-3, "save_steps": 50, "eval_tool_calls": 16}
"""The tiny profile's demo run of the tiny model: 200 steps at 3e-3, where it starts to write parsable calls (its
profile's 60 steps at 1e-3 write none). The profile keeps its own: at 3e-3 the experiments' long-QA cold start ends
with a higher held-out loss than it starts."""
DEMO_PRETRAINED_SFT = {"lora": {"r": 16, "alpha": 32, "layers": 8}, "bf16": True, "learning_rate": 2e-3,
                       "max_steps": 40, "warmup_steps": 0.1, "max_length": 2048, "eval_fraction": 0.25,
                       "eval_tool_calls": 48, "eval_max_tokens": 128, "save_steps": 40}
"""The demo run of a pretrained base (``--base``): adapters on its top 8 layers under bf16 autocast, 40 steps of 2
trajectories at 2e-3, a quarter of the trajectories held out and every tool-calling turn of them scored, so the
change of tool-call validity has an interval (bench/RESULTS.md: on the tiny profile's 30 training trajectories valid
calls rose 0 -> 0.25 by step 30 and no further by step 90)."""


def demo_sft(runtime: Any, summary: list[dict[str, Any]], profile: str, partition: str,
             base: str | None = None) -> None:
    """`gymforge demo`'s last step, on the same server: SFT on the small environments' golden trajectories (else the
    cold-start set) of ``base`` (a pretrained model: imported first when it is a file or directory), or else of the
    tiny policy the refresh trained."""
    from flows.train import train_sft

    keys = {row["stage"]: row["key"] for row in summary if row["status"] in ("published", "cached")}
    data = next((name for name in DEMO_DATA if name in keys), None)
    if data is None or (base is None and DEMO_BASE not in keys):
        typer.echo(f"sft skipped: the refresh published no {' or '.join(DEMO_DATA)}"
                   f"{'' if base else f' and {DEMO_BASE}'}")
        return
    if base is None:
        model, overrides = keys[DEMO_BASE], DEMO_SFT if profile == "tiny" else None
        typer.echo(f"sft: {DEMO_BASE} on {data} (profile {profile})")
    else:
        model, overrides = import_base(base, runtime.root), DEMO_PRETRAINED_SFT
        typer.echo(f"sft: {Path(base).name} ({model}) on {data} with adapters (profile {profile})")
    print_result(train_sft(data=[keys[data]], base=model, profile=profile, partition=partition,
                           data_dir=str(runtime.root), overrides=overrides))


def check_base(base: str) -> None:
    """A BadParameter naming what is wrong with a demo's ``--base``: a path that is no GGUF file or transformers
    directory, or a name that is no path and no model artifact key."""
    from pydantic import ValidationError

    from inference.checkpoint import looks_like_key
    from training.imported_model import ImportParams

    if Path(base).exists():
        try:
            ImportParams(source=base)
        except ValidationError as exc:
            raise typer.BadParameter(exc.errors()[0]["msg"].removeprefix("Value error, "), param_hint="--base") from None
    elif not looks_like_key(base):
        raise typer.BadParameter(f"{base!r} is no file or directory, and no model artifact key (20 hex digits)",
                                 param_hint="--base")


def import_base(base: str, root: Path) -> str:
    """The model artifact key of ``base``: a key as it is; a GGUF file or a transformers directory imported
    (``imported_model``; a cache hit when imported before)."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from data_contracts.runner import execute_stage
    from flows.registry import stage_named

    if not Path(base).exists():
        return base  # a model artifact key: train_sft says what is wrong with it
    importer = stage_named("imported_model")
    run = execute_stage(open_store(root), Catalog(root), importer, importer.parse_params({"source": base}), {},
                        "default")
    typer.echo(f"base {Path(base).name}: model artifact {run.key}{' (cached)' if run.cached else ''}")
    return run.key


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""
    app.add_typer(train_app, name="train")

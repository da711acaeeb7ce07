"""`gymforge` commands of the data room: build KeyChain data through the store, export artifacts for TRL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from data_contracts.stage import Params
from tasks.longctx.keychain import KeyChainParams

SEED_KINDS = ("world", "hotpotqa", "musique", "2wiki")

DataDirOpt = Annotated[Path | None, typer.Option(help="Data root (default: GYMFORGE_DATA or ./data).")]


def seed_source(spec: str) -> str:
    """``world`` or ``KIND:PATH`` with PATH made absolute (the artifact key then names the same file anywhere).

    The file is read up to its first usable seed, so a missing, corrupt, empty or wholly rejected file fails here
    with a ``InputFileError`` naming it, before any server or cluster starts; the stage reads the rest."""
    from tasks.longctx.qa_seeds import load_seed_file

    kind, _, path = spec.partition(":")
    if kind not in SEED_KINDS or (kind == "world") != (not path):
        raise typer.BadParameter(f"--seeds {spec!r}: use world, hotpotqa:PATH, musique:PATH or 2wiki:PATH")
    if kind == "world":
        return "world"
    file, at, split = path.rpartition("@") if "@" in path else (path, "", "")
    resolved = Path(file).expanduser().resolve()
    load_seed_file(kind, resolved, limit=1)
    return f"{kind}:{resolved}{at}{split}"


def param_option(model: type[Params], name: str) -> Any:
    """A command-line option setting one field of a stage's params: its help is the field's description, and left out
    it falls to the profile, then to the field's default; the params model is the one source of both."""
    from rich.markup import escape

    field = model.model_fields[name]
    # help is rich markup: "[target - 2%, target]" in a description is text
    return typer.Option(None, help=escape(f"{field.description} (default: the profile's, else {field.default})"),
                        show_default=False)


def check_options(stage_name: str, options: dict[str, Any]) -> None:
    """A stage's settings from the command line against its params model, before any server or cluster starts; a
    bad value fails on one line naming its option (the settings are named like the options)."""
    from pydantic import ValidationError

    from data_contracts.stage import StageError
    from flows.registry import stage_named

    try:
        stage_named(stage_name).params.model_validate(options)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            option = "--" + str(err["loc"][0]).replace("_", "-")
            problems.append(f"{option} {err['input']!r}: {err['msg'].removeprefix('Value error, ')}")
        raise StageError("; ".join(problems)) from None


def require_new_dir(out: Path) -> None:
    """Refuse an existing --out before any work starts."""
    if out.exists():
        raise typer.BadParameter(f"{out} already exists; choose a new --out directory (nothing was written)")


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""

    @app.command("keychain")
    def keychain(
        out: Annotated[Path, typer.Option(help="Where to write the examples (.parquet, or JSON lines).")],
        seeds: Annotated[str, typer.Option(help="world, hotpotqa:PATH, musique:PATH or 2wiki:PATH.")] = "world",
        n: int | None = param_option(KeyChainParams, "n"),
        n_regular: int | None = param_option(KeyChainParams, "n_regular"),
        target_tokens: int | None = param_option(KeyChainParams, "target_tokens"),
        tokenizer: str | None = param_option(KeyChainParams, "tokenizer"),
        key_format: str | None = param_option(KeyChainParams, "key_format"),
        hops: int | None = param_option(KeyChainParams, "hops"),
        placement: str | None = param_option(KeyChainParams, "placement"),
        profile: Annotated[str, typer.Option(help="Params profile of every stage.")] = "tiny",
        data_dir: DataDirOpt = None,
    ) -> None:
        """Build KeyChain examples (LoongRL section 3.1) through the store, and write them to OUT."""
        from rich.console import Console
        from rich.text import Text

        from data_contracts.files import write_frame

        if tokenizer not in (None, "default"):
            tokenizer = str(Path(tokenizer).expanduser().resolve())
        given = {"n": n, "n_regular": n_regular, "target_tokens": target_tokens, "tokenizer": tokenizer,
                 "key_format": key_format, "hops": hops, "placement": placement}
        keychain_options = {name: value for name, value in given.items() if value is not None}
        check_options("keychain", keychain_options)
        overrides: dict[str, dict[str, Any]] = {"qa_seeds": {"source": seed_source(seeds)},
                                                "keychain": keychain_options}
        from flows.plan import plan_dag

        plan_dag(["keychain"], profile, "default", overrides=overrides)  # with the profile, still before any start
        from flows.dag import materialize  # Prefect and Dask: after every check

        artifact = materialize(["keychain"], profile=profile, overrides=overrides, data_dir=data_dir)["keychain"]
        frame, rejected = artifact.read("keychain"), artifact.read("rejected")
        write_frame(frame, out)
        console = Console(highlight=False)  # paths and reasons are text, never markup
        console.print(Text.assemble((str(frame.height), "green"), f" KeyChain examples -> {out} "
                                    f"(artifact {artifact.key}); {rejected.height} rejected"))
        if frame.height:
            target = frame["target_tokens"][0]
            console.print(f"tokens: min {frame['tokens'].min()}, max {frame['tokens'].max()} "
                          f"(window [{target * 0.98:.0f}, {target}])", markup=False)
        for reason, count in rejected.group_by("reason").len().sort("len", descending=True).iter_rows():
            console.print(f"  rejected {count}: {reason}", markup=False)

    @app.command("export")
    def export(
        artifact: Annotated[str, typer.Option(help="A stage name (e.g. rl_mix), an artifact dir or a parquet file.")],
        out: Annotated[Path, typer.Option(help="Output file: .parquet or .jsonl.")],
        format: Annotated[str, typer.Option("--format", help="trl (prompt as messages; environment tasks as "
                                                             "episodes for GRPOTrainer's environment_factory), sft "
                                                             "(a trajectory artifact as messages + tools for "
                                                             "SFTTrainer), jsonl (all columns), verl or skyrl (their "
                                                             "RL parquet: environment tasks, rl_mix).")] = "trl",
        output: Annotated[str | None, typer.Option(help="Which output of the artifact (default: its main one).")] = None,
        curriculum_stage: Annotated[str | None, typer.Option(help="Keep rows of one curriculum stage.")] = None,
        profile: Annotated[str, typer.Option(help="Params profile when a stage is materialized.")] = "tiny",
        data_dir: DataDirOpt = None,
        distractors: Annotated[int, typer.Option(help="Environment tasks: tools offered beside the task's own (its "
                                                      "task view); -1: every tool of its environment.")] = 3,
    ) -> None:
        """Export prompt messages + answer columns for TRL's GRPOTrainer (``datasets`` loads the file directly)."""
        from flows.export import export as export_rows

        rows = export_rows(artifact, out, format, output=output, curriculum_stage=curriculum_stage, profile=profile,
                           data_dir=data_dir, distractors=None if distractors < 0 else distractors)
        typer.echo(f"{rows} rows -> {out}")

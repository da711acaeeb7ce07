"""`gymforge` commands of the data room: build KeyChain data through the store, export artifacts for TRL."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    import polars as pl

SEED_KINDS = ("world", "hotpotqa", "musique", "2wiki")
MESSAGE_COLUMNS = ("prompt",)  # JSON-string chat messages in the artifacts, lists of messages in an export
JSON_COLUMNS = ("distractor_chains",)

from data_contracts.stage import Params
from tasks.longctx.keychain import KeyChainParams

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


def write_frame(frame: pl.DataFrame | list[dict[str, Any]], out: Path) -> Path:
    """Write parquet (``.parquet``) or JSON lines (anything else) atomically: a temporary sibling, then rename."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        if isinstance(frame, list):
            with tmp.open("w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in frame)
        elif out.suffix == ".parquet":
            frame.write_parquet(tmp)
        else:
            frame.write_ndjson(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def require_new_dir(out: Path) -> None:
    """Refuse an existing --out before any work starts."""
    if out.exists():
        raise typer.BadParameter(f"{out} already exists; choose a new --out directory (nothing was written)")


@contextlib.contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """A fresh temporary sibling of ``out`` to write into, renamed to ``out`` when the block succeeds: all or
    nothing, a failed run leaves no half-written --out."""
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def trl_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """Prompt columns as lists of ``{role, content}`` messages: what ``datasets`` loads and GRPOTrainer reads as a
    conversational prompt; the other columns reach the reward functions as keyword arguments. An artifact without
    a prompt gets the one rl_mix gives the same item: a QA seed (question, docs) on its own documents, a math
    problem (question) on its own."""
    import polars as pl

    from tasks.longctx.rl_mix import question_prompt, seed_prompt

    if "prompt" not in frame.columns:
        if {"question", "docs"} <= set(frame.columns):
            prompts = [seed_prompt(q, d) for q, d in frame.select("question", "docs").iter_rows()]
        elif "question" in frame.columns:
            prompts = [question_prompt(q) for q in frame["question"]]
        else:
            raise typer.BadParameter(f"the artifact has no prompt column and no question to build one from "
                                     f"(columns: {', '.join(frame.columns)})")
        frame = frame.with_columns(pl.Series("prompt", prompts, pl.String))
    messages = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
    return frame.with_columns(pl.col(c).str.json_decode(messages) for c in MESSAGE_COLUMNS)


def sft_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """A `trajectory` artifact as TRL's SFTTrainer reads it: ``messages`` (a list of chat messages, each with the
    record's per-turn ``train`` flag beside its role and content) and ``tools`` (the OpenAI schemas as JSON text,
    which SFTTrainer parses); ``id``, ``source`` and ``train`` ride along."""
    import polars as pl

    missing = {"messages", "tools", "train"} - set(frame.columns)
    if missing:
        raise typer.BadParameter(f"--format sft needs a trajectory artifact (sft_set, midtrain_*); this one lacks "
                                 f"{', '.join(sorted(missing))}")
    records = []
    for row in frame.iter_rows(named=True):
        messages = [{"role": m["role"], "content": m.get("content") or "", "tool_call_id": m.get("tool_call_id"),
                     "tool_calls": [{"id": c.get("id", ""), "type": "function",
                                     "function": {"name": c["function"]["name"],
                                                  "arguments": c["function"]["arguments"]}}
                                    for c in m.get("tool_calls") or []],
                     "train": bool(flag)}
                    for m, flag in zip(json.loads(row["messages"]), row["train"], strict=True)]
        records.append({"id": row["id"], "source": row["source"], "messages": messages, "tools": row["tools"],
                        "train": list(row["train"])})
    return pl.DataFrame(records)


def jsonl_records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Every column, with the JSON-string columns decoded into nested values."""
    records = frame.to_dicts()
    for record in records:
        for column in (*MESSAGE_COLUMNS, *JSON_COLUMNS):
            if isinstance(record.get(column), str):
                record[column] = json.loads(record[column])
    return records


def read_artifact(name: str, output: str | None, profile: str, data_dir: Path | None) -> pl.DataFrame:
    """A parquet file, an artifact directory (``<output>.parquet`` inside), or a stage name materialized through
    the store (a cache hit when it is already published)."""
    import polars as pl

    path = Path(name)
    if path.suffix == ".parquet" and path.is_file():
        return pl.read_parquet(path)
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        chosen = [f for f in files if f.stem == output] if output else [f for f in files if f.stem != "rejected"]
        if not chosen:
            raise typer.BadParameter(f"{path}: no {output or 'output'} parquet file (found {[f.name for f in files]})")
        return pl.read_parquet(chosen[0])
    from flows.registry import stage_named

    stage = stage_named(name)
    output = output or next(o for o in stage.outputs if o != "rejected")
    if output not in stage.outputs:
        raise typer.BadParameter(f"stage {name!r} has outputs {', '.join(stage.outputs)}, not {output!r}")
    artifact = planned_artifact(name, profile, data_dir)
    if artifact is None:  # not made yet: through the store, which starts what it needs
        from flows.pipeline import materialize

        artifact = materialize([name], profile=profile, data_dir=data_dir)[name]
    return artifact.read(output)


def planned_artifact(name: str, profile: str, data_dir: Path | None) -> Any:
    """The artifact the profile makes of stage ``name`` when it is published already: found by its planned key,
    with no Prefect server, cluster or flow run (an export of it takes a second, not a refresh)."""
    from data_contracts.roots import data_root, open_store
    from data_contracts.runner import plan, planned_keys
    from flows.profiles import stage_params
    from flows.registry import stage_named

    keys = planned_keys(plan([name], stage_named), stage_params(profile), "default")
    return open_store(data_root(data_dir)).get(name, keys[name])


def keychain_artifact(overrides: dict[str, dict[str, Any]], profile: str, data_dir: Path | None,
                      runtime: Any = None) -> Any:
    """Materialize `keychain` (and everything upstream) through the store with the given param overrides."""
    from flows.pipeline import materialize

    return materialize(["keychain"], profile=profile, overrides=overrides, data_dir=data_dir,
                       runtime=runtime)["keychain"]


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

        from flows.pipeline import plan_dag

        if tokenizer not in (None, "default"):
            tokenizer = str(Path(tokenizer).expanduser().resolve())
        given = {"n": n, "n_regular": n_regular, "target_tokens": target_tokens, "tokenizer": tokenizer,
                 "key_format": key_format, "hops": hops, "placement": placement}
        keychain_options = {name: value for name, value in given.items() if value is not None}
        check_options("keychain", keychain_options)
        overrides: dict[str, dict[str, Any]] = {"qa_seeds": {"source": seed_source(seeds)},
                                                "keychain": keychain_options}
        plan_dag(["keychain"], profile, "default", overrides=overrides)  # with the profile, still before any start
        artifact = keychain_artifact(overrides, profile, data_dir)
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
        format: Annotated[str, typer.Option("--format", help="trl (prompt as messages), sft (a trajectory artifact "
                                                             "as messages + tools for SFTTrainer) or jsonl (all "
                                                             "columns).")] = "trl",
        output: Annotated[str | None, typer.Option(help="Which output of the artifact (default: its main one).")] = None,
        curriculum_stage: Annotated[str | None, typer.Option(help="Keep rows of one curriculum stage.")] = None,
        profile: Annotated[str, typer.Option(help="Params profile when a stage is materialized.")] = "tiny",
        data_dir: DataDirOpt = None,
    ) -> None:
        """Export prompt messages + answer columns for TRL's GRPOTrainer (``datasets`` loads the file directly)."""
        import polars as pl

        if format not in ("trl", "sft", "jsonl"):
            raise typer.BadParameter(f"--format {format!r}: use trl, sft or jsonl")
        if out.suffix not in (".parquet", ".jsonl") or (format == "jsonl" and out.suffix != ".jsonl"):
            raise typer.BadParameter(f"--out {out}: use a .parquet or .jsonl file (jsonl format: .jsonl)")
        frame = read_artifact(artifact, output, profile, data_dir)
        if curriculum_stage is not None:
            if "curriculum_stage" not in frame.columns:
                raise typer.BadParameter("--curriculum-stage: the artifact has no curriculum_stage column")
            frame = frame.filter(pl.col("curriculum_stage") == curriculum_stage)
        if format == "sft":
            exported = sft_frame(frame)
            write_frame(exported if out.suffix == ".parquet" else exported.to_dicts(), out)
        else:
            write_frame(trl_frame(frame) if format == "trl" else jsonl_records(frame), out)
        typer.echo(f"{frame.height} rows -> {out}")

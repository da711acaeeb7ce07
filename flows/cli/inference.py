"""`gymforge` commands of the inference room: tokenizer training, model init, serving (and difficulty filtering).

Heavy imports (torch, transformers, the Prefect runtime) happen inside the commands, so `gymforge --help` is fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

tokenizer_app = typer.Typer(no_args_is_help=True, help="gymforge's byte-level BPE tokenizer.")
model_app = typer.Typer(no_args_is_help=True, help="Models: the embedded tiny policy, pretrained imports.")


def corpus_files(paths: list[Path]) -> list[Path]:
    """Files named directly, plus every .txt/.md file under named directories (sorted, so training is stable)."""
    from tasks.readers import TEXT_SUFFIXES, text_files

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = text_files(path)
            if not found:
                raise typer.BadParameter(
                    f"{path} holds no {'/'.join(TEXT_SUFFIXES)} files", param_hint="--corpus"
                )
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise typer.BadParameter(f"{path} does not exist", param_hint="--corpus")
    return files


@tokenizer_app.command("train")
def tokenizer_train(
    out: Annotated[Path, typer.Option(help="Directory to write the transformers tokenizer to.")],
    corpus: Annotated[
        list[Path] | None,
        typer.Option(help="Text files or directories of .txt/.md files; default: the world documents."),
    ] = None,
    vocab: Annotated[int, typer.Option(help="Vocabulary size, special tokens included.")] = 8192,
    profile: Annotated[
        str, typer.Option(help="Profile whose `world` stage makes the default corpus.")
    ] = "tiny",
) -> None:
    """Train the byte-level BPE (ChatML chat template with tool calls) and save it as a tokenizer directory."""
    from inference.tokenizer import save, tokenizer_from_row, train_tokenizer

    if out.exists() and any(out.iterdir()):
        raise typer.BadParameter(f"{out} exists and is not empty", param_hint="--out")
    if corpus:
        files = corpus_files(corpus)
        tokenizer = train_tokenizer((p.read_text(encoding="utf-8", errors="replace") for p in files), vocab)
        source = f"{len(files)} file(s)"
    else:  # through the store: the `tokenizer` stage on the `world` documents, cached and gated like any artifact
        from flows.dag import materialize

        artifact = materialize(["tokenizer"], profile=profile, overrides={"tokenizer": {"vocab_size": vocab}})
        tokenizer = tokenizer_from_row(artifact["tokenizer"].read("tokenizer").row(0, named=True))
        source = f"the world documents (profile {profile})"
    save(tokenizer, out)
    typer.echo(f"tokenizer: {len(tokenizer)} tokens trained on {source} -> {out}")


@model_app.command("init")
def model_init(
    tokenizer: Annotated[Path, typer.Option(help="Tokenizer directory (from `gymforge tokenizer train`).")],
    out: Annotated[
        Path, typer.Option(help="Directory to write the checkpoint to (must not exist or be empty).")
    ],
    size: Annotated[str, typer.Option(help="tiny (~1M parameters) or small (~10M).")] = "tiny",
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
) -> None:
    """Initialise a Qwen2-architecture causal LM for the tokenizer; saved with the tokenizer alongside."""
    from training.tiny_model import SIZES, init_model, parameter_count

    if size not in SIZES:
        raise typer.BadParameter(f"{size!r}: choose one of {', '.join(SIZES)}", param_hint="--size")
    try:
        path = init_model(size, tokenizer, out, seed)  # type: ignore[arg-type]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    typer.echo(f"model: {size}, {parameter_count(model):,} parameters -> {path}")


@model_app.command("import")
def model_import(
    source: Annotated[Path, typer.Argument(help="A .gguf file or a transformers checkpoint directory.")],
    chat_template: Annotated[str, typer.Option(help="auto, keep, gymforge or a Jinja file with {% generation %} "
                                                    "markers (as `train sft --chat-template`).")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16 (a GGUF file is dequantized to it).")] = "float32",
    data_dir: Annotated[Path | None, typer.Option(help="Data root (default $GYMFORGE_DATA or ./data).")] = None,
) -> None:
    """Import a pretrained checkpoint as a model artifact (card, tokenizer, a chat template with gymforge's tool-call
    format when the source's cannot train): a base for `train sft --base KEY`, `eval`, `serve`."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from data_contracts.runner import execute_stage
    from data_contracts.stage import StageError
    from flows.registry import stage_named
    from inference.checkpoint import model_card_of

    root = data_root(data_dir)
    store, catalog = open_store(root), Catalog(root)
    importer = stage_named("imported_model")
    try:
        params = importer.parse_params({"source": str(source), "chat_template": chat_template, "dtype": dtype})
        run = execute_stage(store, catalog, importer, params, {}, "default")
    except StageError as exc:
        raise typer.BadParameter(str(exc), param_hint="SOURCE") from None
    card = model_card_of(store.get("imported_model", run.key))
    typer.echo(f"imported {source.name}: {card['parameters']:,} parameters ({card['dtype']}), chat template "
               f"{card['chat_template']['source']} ({card['chat_template']['reason']})"
               f"{' (cached)' if run.cached else ''}")
    typer.echo(f"model key: {run.key}   e.g. gymforge train sft --base {run.key}")


def serve(
    model: Annotated[str, typer.Option(help="Checkpoint directory (a transformers model + tokenizer) or the key of a "
                                            "model artifact (`gymforge artifacts ls --kind model`).")],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[
        str, typer.Option(help="Interface to bind; 0.0.0.0 exposes it beyond this machine.")
    ] = "127.0.0.1",
    name: Annotated[str | None, typer.Option(help="Served model name (default: the directory name).")] = None,
    max_batch_size: Annotated[int, typer.Option(help="Most samples generated together in one batch.")] = 8,
) -> None:
    """Serve a local checkpoint or a model artifact with an OpenAI-compatible API (/v1/models,
    /v1/chat/completions)."""
    from inference.checkpoint import checkpoint_directory
    from inference.server import serve as run_server

    try:
        path = checkpoint_directory(model)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None
    if not (path / "config.json").is_file():
        raise typer.BadParameter(f"{path} is not a checkpoint directory (no config.json)", param_hint="--model")
    served = name or (path.name if Path(model).expanduser().is_dir() else model)  # an artifact is served by its key
    typer.echo(f"serving {path} at http://{host}:{port}/v1 as {served!r}")
    run_server(path, host=host, port=port, max_batch_size=max_batch_size, served_model_name=served)


def serve_env(
    artifact: Annotated[str, typer.Argument(help="An environment artifact: its key, or a stage with one published "
                                                 "artifact (environments, small_envs, noisy_tasks, "
                                                 "eval_random_envs).")],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[
        str, typer.Option(help="Interface to bind; 0.0.0.0 exposes it beyond this machine.")
    ] = "127.0.0.1",
    max_sessions: Annotated[int, typer.Option(help="Cap on concurrent sessions (one database copy each).")] = 64,
    idle_timeout: Annotated[float, typer.Option(help="Seconds before an idle session is closed (0: never).")] = 300.0,
    max_steps: Annotated[int, typer.Option(help="Calls per episode before it is scored as it stands.")] = 40,
    distractors: Annotated[int, typer.Option(help="Offer each task its task view: its own tools and this many "
                                                  "others (compact schemas); -1: every tool of its environment.")] = -1,
    data_dir: Annotated[Path | None, typer.Option(help="Data root (default: GYMFORGE_DATA or ./data).")] = None,
) -> None:
    """Serve an environment artifact's tasks as an OpenEnv environment: WebSocket sessions at /ws (reset with
    task_id or seed, episode_id, noise_level), the task's tools over MCP, the simulated user through respond."""
    from data_contracts.stage import StageError
    from inference.environments.server import ServerSettings, serve
    from inference.environments.tasks import served_artifact

    try:
        served = served_artifact(artifact, data_dir)
        settings = ServerSettings(max_sessions=max_sessions, idle_timeout_s=idle_timeout or None,
                                  max_steps=max_steps, distractors=None if distractors < 0 else distractors)
    except (StageError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="ARTIFACT") from None
    described = served.describe()
    typer.echo(f"serving {described['tasks']} tasks of {served.source} ({described['environments']} environments) "
               f"at http://{host}:{port} (OpenEnv: /ws, /mcp, /health, /tasks)")
    serve(served, host=host, port=port, settings=settings)


FILTER_STAGES = {"qa": "qa_filtered", "tasks": "task_filtered"}


def filter_command(
    what: Annotated[str, typer.Argument(help="qa (the QA seeds) or tasks (the environment tasks).")],
    profile: Annotated[str, typer.Option(help="Profile of stage params.")] = "tiny",
    engine: Annotated[
        str | None, typer.Option(help="Reference engine: tiny, hf:DIR, openai:URL#MODEL or vllm:DIR.")
    ] = None,
    k: Annotated[int | None, typer.Option(help="Samples per item (default from the profile: 8).")] = None,
    window: Annotated[
        tuple[int, int] | None, typer.Option(help="Inclusive pass-count window kept, e.g. --window 1 6.")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the pass-count histogram PNG here.")] = None,
) -> None:
    """Difficulty filtering through the store: keep items the reference policy solves in some but not all of k
    samples; prints the pass-count histogram."""
    from flows.dag import materialize
    from tasks.difficulty import plot_pass_histogram

    if what not in FILTER_STAGES:
        raise typer.BadParameter(f"{what!r}: choose one of {', '.join(FILTER_STAGES)}", param_hint="WHAT")
    name = FILTER_STAGES[what]
    raw = {"engine": engine, "k": k, "window": list(window) if window else None}
    overrides = {name: {key: value for key, value in raw.items() if value is not None}}
    artifact = materialize([name], profile=profile, overrides=overrides)[name]
    histogram = artifact.read("histogram")
    kept = artifact.read("seeds" if what == "qa" else "tasks").height
    typer.echo(f"{name}: kept {kept} of {int(histogram['n'].sum())} -> {artifact.path}")
    for count, n in histogram.iter_rows():
        typer.echo(f"  pass {count:>2}: {'#' * n} {n}")
    if plot is not None:
        typer.echo(f"histogram: {plot_pass_histogram(histogram, plot, title=name)}")


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""
    app.add_typer(tokenizer_app, name="tokenizer")
    app.add_typer(model_app, name="model")
    app.command("serve")(serve)
    app.command("serve-env")(serve_env)
    app.command("filter")(filter_command)

"""The ``gymforge`` command line.

Global options (``--data-dir``, ``--prefect-api-url``, ``--dask-address``) are exported to the environment, so
every command, room commands calling ``flows.dag.materialize`` included, runs against the same data root,
Prefect API and Dask scheduler. Heavy imports (Prefect, Dask, DuckDB) happen inside the commands.
"""

from __future__ import annotations

import os

# Before torch loads, here and in every Dask worker this process spawns: OpenMP's default active wait made the tiny
# model 6-50x slower on a shared 2-core machine (bench/RESULTS.md). An explicit setting is left alone.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Likewise glibc's allocator: CPU torch steps re-fault their large tensors otherwise (inference/cpu.py).
from inference.cpu import tune_allocator

tune_allocator()
# Per-file download/load bars of transformers interleave across workers; the stage tables say what ran.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# Analytics are off (docs/run-the-pipeline.md): the server is started with them off, and this says it to Prefect's
# client too, which otherwise prints a usage-data notice on a terminal; runs of deployments inherit it from
# `gymforge worker`.
os.environ.setdefault("DO_NOT_TRACK", "1")
# The project's own warnings (a stage's "bf16 off", ...) reach the run's Logs tab as Prefect's own lines do, here and
# in every process this one starts; one logged outside any run has no tab to go to, and that is no news.
if "gymforge" not in os.environ.get("PREFECT_LOGGING_EXTRA_LOGGERS", "").split(","):
    os.environ["PREFECT_LOGGING_EXTRA_LOGGERS"] = ",".join(
        filter(None, [os.environ.get("PREFECT_LOGGING_EXTRA_LOGGERS"), "gymforge"]))
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")

import contextlib
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from flows.cli import data, deploy, envgen, experiment, inference, midtrain, noise, research, train
from flows.cli import eval as eval_room  # bound under another name: `eval` is a builtin
from flows.terminal import after_import, print_table, stdout_console

if TYPE_CHECKING:
    import polars as pl

    from data_contracts.catalog import Entry

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="gymforge: agentic and long-context LLM training data and training.",
)
artifacts_app = typer.Typer(no_args_is_help=True, help="Inspect the artifact catalog (catalog.duckdb).")
app.add_typer(artifacts_app, name="artifacts")

INTERRUPTED = re.compile(r"aborted by an? (interrupt|termination) signal")
"""Prefect's error lines about a run the user stopped (Ctrl-C, SIGTERM): its task and flow runs' "Crash detected!" and
"Finished in state Crashed(...)"."""

console = stdout_console()  # tables fit a terminal and arrive whole in a pipe (flows/terminal.py)
UNWRAPPED = {"stage", "key", "status"}  # names people read or copy: never broken across lines
errors = Console(stderr=True, soft_wrap=True)  # an error is one line, whatever the terminal width

for room in (data, envgen, noise, inference, deploy, research, train, midtrain, eval_room, experiment):
    room.register(app)


# Exceptions that mean "the input or the environment is wrong": a message, never a traceback. Each is looked up only
# if its module was imported (an error of a module the command never loaded cannot have been raised), so a command
# that starts no flow never pays for importing Prefect.
USER_ERRORS = (("data_contracts.stage", "StageError"), ("data_contracts.roots", "DataRootError"),
               ("data_contracts.objectstore", "ObjectStoreError"), ("flows.dag", "PipelineFailed"),
               ("flows.backfill", "BackfillError"), ("flows.prefect_server", "RuntimeStartError"),
               ("duckdb", "Error"))


def _user_errors() -> tuple[type[BaseException], ...]:
    loaded = tuple(getattr(sys.modules[module], name) for module, name in USER_ERRORS if module in sys.modules)
    return (*loaded, FileNotFoundError)


@contextlib.contextmanager
def _clean_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, _user_errors()):
            raise
        # the message is the user's text and ours, never markup: "[/x]" or "[target - 2%, target]" print as is
        errors.print(Text.assemble(("error: ", "bold red"), str(exc)), highlight=False)
        raise typer.Exit(1) from None


@app.callback()
def _global_options(
    ctx: typer.Context,
    data_dir: Annotated[
        str | None,
        typer.Option("--data-dir", envvar="GYMFORGE_DATA", help="Data root: a directory (default ./data) or an "
                     "object store URL (s3://bucket/prefix)."),
    ] = None,
    prefect_api_url: Annotated[
        str | None,
        typer.Option("--prefect-api-url", envvar="PREFECT_API_URL", help="Attach to this Prefect API, start none."),
    ] = None,
    dask_address: Annotated[
        str | None,
        typer.Option("--dask-address", envvar="GYMFORGE_DASK_ADDRESS", help="Attach to this Dask scheduler, start none."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Prefect's run logs in the console.")] = False,
) -> None:
    from data_contracts.roots import DATA_ENV, data_root
    from flows.runtime import API_ENV, DASK_ENV

    os.environ[DATA_ENV] = str(data_root(data_dir))
    for name, value in ((API_ENV, prefect_api_url), (DASK_ENV, dask_address)):
        if value:
            os.environ[name] = value
    if not verbose:
        _quiet_console_logs()
        if not sys.stderr.isatty():  # no live bar there: a line per reported step instead (a terminal gets the bar)
            ctx.with_resource(_progress_lines())


@contextlib.contextmanager
def _progress_lines() -> Iterator[None]:
    """Reported lines on stderr while the command runs. Afterwards the logger is as it was: a command invoked in a
    process that goes on (a notebook, a test) leaves it no handler bound to a stream that may since have closed."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    progress = logging.getLogger("gymforge.progress")
    level, propagate = progress.level, progress.propagate
    progress.addHandler(handler)
    progress.setLevel(logging.INFO)
    progress.propagate = False  # a notebook's or a worker's root handlers print it their own way
    try:
        yield
    finally:
        progress.removeHandler(handler)
        progress.setLevel(level)
        progress.propagate = propagate


def _quiet_console_logs() -> None:
    """Keep run logs in the Prefect UI but out of the console, where the progress bar and summary go.

    Worker processes read the environment override (there every console line is a task run's, which the summary
    table and the one error message already say). This process shows warnings and errors, less what the command says
    itself: it sets its console handler once ``prefect.main`` has created it (importing any of Prefect's public names
    does), which a command that starts no flow never does."""
    os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "CRITICAL"
    # tqdm bars of libraries used inside stages (transformers loading weights) would interleave from every worker
    os.environ.setdefault("TQDM_DISABLE", "1")
    after_import("prefect.main", _filter_prefect_console)


def _filter_prefect_console() -> None:
    from prefect.logging.handlers import PrefectConsoleHandler

    from flows.failures import says_a_user_error

    def not_said_otherwise(record: logging.LogRecord) -> bool:
        # the one error line (and a pipeline's summary table) say a user error; the engine's traceback, or a task's
        # "Finished in state Failed(... StageError: ...)" line, would only say it again. A run stopped by Ctrl-C or
        # SIGTERM says so itself: Prefect's "Crash detected" lines of its interrupted runs are not news.
        user_errors = _user_errors()
        if record.exc_info and isinstance(record.exc_info[1], (*user_errors, KeyboardInterrupt, SystemExit)):
            return False
        if record.levelno >= logging.ERROR and INTERRUPTED.search(record.getMessage()):
            return False
        return not (record.levelno >= logging.ERROR and says_a_user_error(record, user_errors))

    for logger in (logging.getLogger(), logging.getLogger("prefect")):
        for handler in logger.handlers:
            if isinstance(handler, PrefectConsoleHandler):
                handler.setLevel(logging.WARNING)
                handler.addFilter(not_said_otherwise)


def _summary_table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    """stage, key, status (published | cached | failed | blocked), rows, contract, seconds."""
    cells = [
        (row["stage"], row["key"], row["status"], f"{row['rows']:,}", row["contract"], f"{row['seconds']:.2f}")
        for row in rows
    ]
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for i, column in enumerate(("stage", "key", "status", "rows", "contract", "seconds")):
        # every cell is short: keep each whole rather than let a narrow terminal cut keys and numbers
        width = max([len(column), *(len(cell[i]) for cell in cells)])
        table.add_column(column, justify="right" if column in {"rows", "seconds"} else "left", no_wrap=True,
                         min_width=width)
    styles = {"published": "green", "cached": "cyan", "failed": "bold red", "blocked": "yellow"}
    for row, cell in zip(rows, cells, strict=True):
        table.add_row(*cell, style=styles.get(row["status"]))
    return table


def _refresh_with_progress(
    stages: Sequence[str] | None, profile: str, partition: str, force: bool, keep_ui: bool = False,
    then: Callable[[Any, list[dict[str, Any]]], None] | None = None,
) -> None:
    """Run data_refresh on a Runtime with a progress bar (a step per stage), print the summary and the UI URL;
    ``then(runtime, summary)`` runs next on the same Runtime (the demo's training)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from flows.plan import plan_dag
    from flows.runtime import Runtime

    planned = plan_dag(stages, profile, partition, force=force)  # bad names and params fail before anything starts
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    title = f"data-refresh {partition} (profile {profile})"
    with Runtime() as rt:  # the data root, API and scheduler the global options exported
        # Prefect and the stages' flows: once the settings proved sound
        from flows.dag import PipelineFailed, on_stage_done, refresh

        console.print(f"Prefect UI: {rt.ui_url}   data root: {rt.root}")
        with Progress(*columns, console=errors, transient=True) as progress:
            bar = progress.add_task(title, total=len(planned))

            def done(row: dict[str, Any]) -> None:
                progress.update(bar, advance=1, description=f"{row['stage']}: {row['status']}")

            try:
                with on_stage_done(done):
                    summary = refresh(rt, profile=profile, partition=partition, stages=stages, force=force)
            except PipelineFailed as failure:
                print_table(console, _summary_table(failure.summary, f"{title}: FAILED"))
                raise
        print_table(console, _summary_table(summary, title))
        console.print(f"Data Docs: {rt.home / 'data_docs' / 'index.html'}")
        if then is not None:
            then(rt, summary)
        if keep_ui:
            _wait_for_ctrl_c(rt.ui_url)
        elif rt.started_server:
            console.print("The Prefect server stops with this command; browse these runs with `gymforge ui`.")


def _wait_for_ctrl_c(url: str) -> None:
    console.print(f"Prefect UI at [link={url}]{url}[/link]; press Ctrl-C to stop it.")
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


@app.command()
def demo(
    profile: Annotated[str, typer.Option(help="tiny | small | default | full, or a path to a profile YAML.")] = "tiny",
    partition: Annotated[str, typer.Option(help="Partition to materialize.")] = "default",
    keep_ui: Annotated[bool, typer.Option("--keep-ui", help="Keep the Prefect server up until Ctrl-C.")] = False,
    base: Annotated[str | None, typer.Option(help="A pretrained base to fine-tune with adapters after the data "
                                                  "stages: a .gguf file, a transformers directory or a model "
                                                  "artifact key (make demo passes SmolLM2-135M-Instruct); without "
                                                  "it, the tiny policy the pipeline trains.")] = None,
) -> None:
    """Run every registered stage's DAG on a profile, then cold-start SFT (the `train-sft` flow) of the base, or of
    the tiny policy, on the small environments' golden trajectories; print the UI URL and a summary."""
    with _clean_errors():
        if base is not None:
            train.check_base(base)  # before the data stages run
        _refresh_with_progress(None, profile, partition, force=False, keep_ui=keep_ui,
                               then=lambda rt, summary: train.demo_sft(rt, summary, profile, partition, base))


@app.command()
def run(
    stages: Annotated[list[str], typer.Argument(help="Stages to materialize (their upstream runs too).")],
    profile: Annotated[str, typer.Option(help="tiny | small | default | full, or a path to a profile YAML.")] = "tiny",
    partition: Annotated[str, typer.Option(help="Partition to materialize.")] = "default",
    force: Annotated[bool, typer.Option(help="Re-run the named stages even when cached.")] = False,
) -> None:
    """Materialize STAGES and everything upstream of them through the artifact store."""
    with _clean_errors():
        _refresh_with_progress(stages, profile, partition, force)


@app.command()
def backfill(
    stage: Annotated[str, typer.Option(help="Stage to backfill (its upstream runs too).")],
    partitions: Annotated[str, typer.Option(help="Comma-separated partitions, e.g. p0,p1,p2.")],
    force: Annotated[bool, typer.Option(help="Re-run even when cached; once per code version, since a repeated "
                                             "backfill returns the runs of its idempotency key.")] = False,
    profile: Annotated[str, typer.Option(help="Profile of params.")] = "tiny",
    serve: Annotated[
        bool,
        typer.Option(help="Serve the backfill flow from this process and wait, instead of a deployed worker."),
    ] = False,
) -> None:
    """One `backfill` flow run per partition through run_deployment (idempotency key, tag `backfill`).

    Without --serve the `backfill` deployment must exist (`prefect --no-prompt deploy --all`) and a worker must
    poll its pool (`prefect worker start --pool cpu`); the command returns once the runs exist. Re-running the
    same backfill returns the same runs.
    """
    from flows.plan import plan_dag
    from flows.runtime import Runtime

    names = [p.strip() for p in partitions.split(",") if p.strip()]
    with _clean_errors():
        plan_dag([stage], profile, names[0] if names else "default")  # a bad stage or profile fails here, not in N runs
        with Runtime(dask=serve) as rt:
            from flows.backfill import run_backfill  # Prefect: once the settings proved sound

            runs = run_backfill(stage, names, force=force, profile=profile, serve=serve,
                                data_dir=str(rt.root) if serve else None)
    # a server this command started stops with it: point at the command that brings the UI back instead
    where = "browse them with `gymforge ui`" if rt.started_server else f"runs at {rt.ui_url}/runs/flow-run/<id>"
    table = Table(title=f"backfill {stage}", caption=where, box=box.SIMPLE_HEAD)
    for column in ("partition", "flow run id", "state"):
        table.add_column(column, no_wrap=True)
    for item in runs:
        table.add_row(item.partition, item.flow_run_id, item.state)
    print_table(console, table)
    if serve and any(item.state != "Completed" for item in runs):
        raise typer.Exit(1)


@app.command()
def ui(
    detach: Annotated[bool, typer.Option(help="Leave the server running after this command exits.")] = False,
    stop: Annotated[bool, typer.Option(help="Stop the data root's server now.")] = False,
) -> None:
    """Start (or reuse) the Prefect server of this data root and print the UI URL; it stops with this command
    (Ctrl-C) unless --detach, and runs started meanwhile share it."""
    from data_contracts.roots import writable_data_root
    from flows.prefect_server import ServerLease, stop_server, ui_url

    with _clean_errors():
        root = writable_data_root()
        if stop:
            console.print("stopped" if stop_server(root) else f"no server is running for {root}")
            return
        if url := os.environ.get("PREFECT_API_URL"):
            console.print(f"Prefect UI (PREFECT_API_URL): {ui_url(url)}")
            return
        lease = ServerLease(root, keep=detach)
        url = ui_url(lease.acquire())
    if detach:
        console.print(f"Prefect UI: {url}  (it stays up until `gymforge ui --stop`)")
        return
    try:
        _wait_for_ctrl_c(url)
    finally:
        lease.release()


def _print_frame(frame: pl.DataFrame, title: str | None = None) -> None:
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for column in frame.columns:
        width = max((len(str(value)) for value in frame[column]), default=0) if column in UNWRAPPED else None
        table.add_column(column, overflow="fold", no_wrap=column in UNWRAPPED, min_width=width)
    for row in frame.iter_rows():  # cells are data, never markup
        table.add_row(*(Text("" if value is None else str(value)) for value in row))
    print_table(console, table)


def _catalog() -> Any:
    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root

    catalog = Catalog(data_root())
    if not catalog.path.exists() and isinstance(catalog.root, str):
        # an object-store data root's catalog is a local cache of its manifests: build it on first use here
        from data_contracts.roots import open_store

        catalog.rebuild(open_store(catalog.root))
    return catalog


@artifacts_app.command("ls")
def artifacts_ls(
    stage: Annotated[str | None, typer.Option(help="Only this stage.")] = None,
    status: Annotated[str | None, typer.Option(help="published | quarantined")] = None,
    kind: Annotated[str | None, typer.Option(help="data | model | index (models: base, steps, final metric, "
                                                  "date)")] = None,
) -> None:
    """List artifacts: stage, kind, partition, key, status, rows, bytes (`show KEY` for the rest); models with
    their base, steps, final metric and date."""
    import polars as pl

    with _clean_errors():
        catalog = _catalog()
        entries = catalog.entries(stage=stage, status=status, kind=kind)
        if not entries:
            console.print(_nothing_listed(catalog, stage, status, kind))
            return
        columns = ("stage", "kind", "partition", "key", "status", "rows", "bytes")
        frame = (_model_rows(catalog, entries) if kind == "model"
                 else pl.DataFrame([{column: getattr(entry, column) for column in columns} for entry in entries]))
    _print_frame(frame, f"{frame.height} artifacts")


def _nothing_listed(catalog: Any, stage: str | None, status: str | None, kind: str | None) -> str:
    """Why ``artifacts ls`` found nothing: an empty data root, or a filter that matches nothing here."""
    import difflib

    stages = catalog.stages()
    if not stages:
        return f"no artifacts yet in {catalog.root}: run `gymforge demo` or `gymforge run STAGE`"
    if stage is not None and stage not in stages:
        close = difflib.get_close_matches(stage, stages, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"no artifact of stage {stage!r} in {catalog.root} ({hint}stages here: {', '.join(stages)})"
    asked = ", ".join(f"{name} {value}" for name, value in (("stage", stage), ("status", status), ("kind", kind))
                      if value is not None)
    return f"no artifact with {asked} in {catalog.root}"


def _model_rows(catalog: Any, entries: list[Entry]) -> pl.DataFrame:
    """Model artifacts as people tell them apart: what they started from, how long they trained, the final figure
    of their card, and when they were published (their manifest's time)."""
    import datetime

    import polars as pl

    from data_contracts.roots import open_store
    from inference.checkpoint import model_card_of

    store = open_store(catalog.root)
    rows = []
    for entry in entries:
        artifact = store.get(entry.stage, entry.key) if entry.status == "published" else None
        card = model_card_of(artifact) if artifact is not None else {}
        manifest = artifact.path / "manifest.json" if artifact is not None else None
        published = (datetime.datetime.fromtimestamp(manifest.stat().st_mtime).strftime("%Y-%m-%d %H:%M")
                     if manifest is not None and manifest.is_file() else "")
        rows.append({"stage": entry.stage, "key": entry.key, "base": str(card.get("base", "")),
                     "steps": str(card.get("steps", "")), "final metric": _final_metric(card),
                     "published": published, "partition": entry.partition, "status": entry.status})
    return pl.DataFrame(rows)


def _final_metric(card: dict[str, Any]) -> str:
    metrics = card.get("metrics") or {}
    for name, label in (("loss", "eval loss"), ("reward", "reward")):
        if isinstance(metrics.get(name), int | float):
            return f"{label} {metrics[name]:.4g}"
    return f"train loss {card['final_loss']:.4g}" if isinstance(card.get("final_loss"), int | float) else ""


@artifacts_app.command("show")
def artifacts_show(
    key: Annotated[str, typer.Argument(help="Artifact key (see `gymforge artifacts ls`).")],
    as_json: Annotated[bool, typer.Option("--json", help="The raw manifest as JSON.")] = False,
) -> None:
    """Show one artifact: what made it, its outputs and contract, its params, and its lineage."""
    from data_contracts.roots import open_store
    from data_contracts.stage import StageError

    with _clean_errors():
        catalog = _catalog()
        found = catalog.entry(key)
        if found is None:
            raise StageError(f"no artifact with key {key!r} in {catalog.path}; list them with `gymforge artifacts ls`")
        stage, status = found.stage, found.status
        store = open_store(catalog.root)
        published = store.get(stage, key) if status == "published" else None
        manifest = published.manifest if published is not None else store.quarantined_manifest(stage, key)
        if manifest is None:
            raise StageError(f"the catalog lists {stage}/{key} ({status}) but its files are gone; "
                             "run `gymforge artifacts fsck --repair`")
        path = published.path if published is not None else store.quarantine_path(stage, key)
        if as_json:
            console.print_json(json.dumps(manifest, default=str))
            return
        lineage = catalog.lineage(key)
    console.print(Text.assemble((manifest["stage"], "bold"), f" {key} ({status}) at {path}"))
    for table in _manifest_tables(manifest):
        print_table(console, table)
    if not lineage.is_empty():
        _print_frame(lineage, "lineage (upstream artifacts)")


def _manifest_tables(manifest: dict[str, Any]) -> list[Table]:
    """A manifest as people read it: what made the artifact, its outputs with their contract verdicts, its params."""
    code = manifest.get("code_version") or {}
    timings = ", ".join(f"{name} {seconds:.2f}" for name, seconds in (manifest.get("timings") or {}).items())
    about = [("kind", manifest.get("kind", "data")), ("partition", manifest.get("partition")),
             ("version", manifest.get("version")), ("resources", manifest.get("resources")),
             ("code", f"{code.get('git_sha', '')[:12]}{' (dirty)' if code.get('dirty') else ''}"),
             ("flow run", manifest.get("flow_run_id")), ("timings (s)", timings),
             *((f"input {stage}", input_key) for stage, input_key in sorted((manifest.get("input_keys") or {}).items())),
             *((f"local input {path}", f"sha256 {content.get('sha256', '')[:16]}, {content.get('files')} file(s)")
               for path, content in sorted((manifest.get("local_inputs") or {}).items()))]
    facts = _two_columns("artifact", about)
    contract = manifest.get("contract") or {}
    outputs = Table(title="outputs", box=box.SIMPLE_HEAD)
    for column in ("output", "rows", "bytes", "contract", "failed"):
        outputs.add_column(column, justify="right" if column in ("rows", "bytes") else "left")
    described = manifest.get("directory")
    entries = [*((name, out.get("rows"), out.get("bytes")) for name, out in (manifest.get("outputs") or {}).items()),
               *([(described["name"], len(described.get("files", {})), described.get("bytes"))] if described else [])]
    for name, rows, size in entries:
        verdict = contract.get(name, {})
        failed = ", ".join(str(f.get("name", f)) if isinstance(f, dict) else str(f) for f in verdict.get("failed", []))
        outputs.add_row(Text(name), f"{rows:,}" if isinstance(rows, int) else "", f"{size:,}" if size else "",
                        "passed" if verdict.get("passed") else "FAILED" if verdict else "", Text(failed))
    params = _two_columns("params", _flatten(manifest.get("params") or {}))
    return [facts, outputs, params]


def _two_columns(title: str, rows: Sequence[tuple[str, Any]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(Text(name), Text("" if value is None else value if isinstance(value, str) else
                                       json.dumps(value, default=str)))
    return table


def _flatten(params: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested params as dotted names (``sampling.max_tokens``), as `gymforge params` and `--set` name them."""
    rows: list[tuple[str, Any]] = []
    for name, value in params.items():
        if isinstance(value, dict) and value:
            rows += _flatten(value, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", value))
    return rows


@artifacts_app.command("fsck")
def artifacts_fsck(
    repair: Annotated[bool, typer.Option(help="Fix what is found: finish killed writers' leftovers, drop broken "
                                              "artifacts, rebuild the catalog from the manifests.")] = False,
) -> None:
    """Check the whole data root: missing or truncated files, leftover temp dirs, catalog rows without artifacts
    and artifacts without rows. Exits 1 when a problem remains."""
    from data_contracts import fsck
    from data_contracts.roots import open_store

    with _clean_errors():
        catalog = _catalog()
        store = open_store(catalog.root)
        problems = fsck.check(store, catalog)
        if problems and repair:
            fsck.repair(store, catalog)
            fixed, problems = problems, fsck.check(store, catalog)
            console.print(f"repaired {len(fixed) - len(problems)} of {len(fixed)} problem(s)")
    if not problems:
        console.print(f"{catalog.root}: store and catalog agree")
        return
    table = Table(title=f"{len(problems)} problem(s) in {catalog.root}", box=box.SIMPLE_HEAD)
    for column in ("problem", "where", "detail"):
        table.add_column(column, overflow="fold")
    for problem in problems:
        table.add_row(problem.kind, problem.where, problem.detail)
    print_table(console, table)
    if not repair:
        console.print("fix them with `gymforge artifacts fsck --repair`")
    raise typer.Exit(1)


@artifacts_app.command("gc")
def artifacts_gc(
    older_than: Annotated[float, typer.Option(help="Hours: remove uncommitted writes older than this (a writer still "
                                                   "uploading is younger).")] = 6.0,
) -> None:
    """Remove what writers left uncommitted: attempts no manifest commits (object stores) and temp directories
    (local roots) older than --older-than, and leftovers of dead writers on this host."""
    from data_contracts.roots import open_store

    with _clean_errors():
        if older_than < 0:
            raise typer.BadParameter(f"--older-than {older_than}: give a number of hours >= 0")
        removed = open_store(_catalog().root).gc(older_than * 3600)
    for where in removed:
        console.print(Text(f"removed {where}"))
    console.print(f"{len(removed)} uncommitted write(s) removed")


@artifacts_app.command("schema")
def artifacts_schema(
    record: Annotated[str | None, typer.Argument(help="One record (default: list them all).")] = None,
) -> None:
    """The record formats every artifact's outputs hold (declared beside their branches), each column documented."""
    from data_contracts.stage import StageError
    from flows.registry import records

    with _clean_errors():
        known = records()
        if record is None:
            table = Table(title=f"{len(known)} records", box=box.SIMPLE_HEAD)
            for column in ("record", "key", "columns", "what it is"):
                table.add_column(column, overflow="fold")
            for name, rec in sorted(known.items()):
                table.add_row(name, ", ".join(rec.key), str(len(rec.columns)), Text(rec.doc))
            print_table(console, table)
            return
        if record not in known:
            raise StageError(f"unknown record {record!r}; records: {', '.join(sorted(known))}")
        rec = known[record]
        table = Table(title=Text(f"{record}: {rec.doc}"), box=box.SIMPLE_HEAD)
        for column in ("column", "dtype", "meaning"):
            table.add_column(column, overflow="fold")
        for name, column in rec.columns.items():
            table.add_row(name + (" (key)" if name in rec.key else ""), str(column.dtype), Text(column.doc))
        print_table(console, table)


@app.command("params")
def params_command(
    stage: Annotated[str, typer.Argument(help="A stage, e.g. sft, rl, keychain (`gymforge artifacts schema` for "
                                              "records).")],
) -> None:
    """The params of a stage, what a profile section or `--set name=value` can set: field, default, meaning."""
    from flows.registry import stage_named

    with _clean_errors():
        model = stage_named(stage).params
    table = Table(title=f"params of stage {stage!r}", box=box.SIMPLE_HEAD)
    for column in ("field", "default", "meaning"):
        table.add_column(column, overflow="fold")
    for name, default, doc in _params_rows(model):
        table.add_row(name, Text(default), Text(doc))
    print_table(console, table)


def _params_rows(model: Any, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(dotted name, default, description) of every field, nested settings expanded (``sampling.max_tokens``)."""
    from pydantic import BaseModel

    for name, info in model.model_fields.items():
        if info.exclude:  # how a run executes (set by the commands), not what it trains
            continue
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            yield from _params_rows(info.annotation, f"{prefix}{name}.")
            continue
        default = info.get_default(call_default_factory=True)
        yield f"{prefix}{name}", json.dumps(default, default=str), info.description or ""


@artifacts_app.command("query")
def artifacts_query(sql: Annotated[str, typer.Argument(help="Read-only SQL over tables `artifacts` and `lineage`.")]) -> None:
    """Run SQL over the catalog, e.g. "SELECT stage, count(*) FROM artifacts GROUP BY stage"."""
    with _clean_errors():
        _print_frame(_catalog().query(sql))


STOPPED = {130: "Ctrl-C", 143: "SIGTERM"}  # exit codes of a run stopped by a signal (128 + its number)


def main() -> None:
    try:
        with _clean_errors():  # room commands and the global options too: a message, not a traceback
            app()
    except typer.Exit as exit_:  # raised outside click's own handling, which would turn it into the exit code
        _say_stopped(exit_.exit_code)
        sys.exit(exit_.exit_code)
    except SystemExit as exit_:
        _say_stopped(exit_.code)
        raise


def _say_stopped(code: object) -> None:
    """The one line of a command stopped by Ctrl-C (typer turns it into exit 130) or SIGTERM (the runtime's exit
    143): what was running has been stopped, its servers and workers with it, and nothing half-made was kept."""
    if code in STOPPED:
        errors.print(Text.assemble(("stopped ", "bold yellow"), f"by {STOPPED[code]}: nothing unfinished was "
                                   "published; checkpoints of a training run are kept for --resume"),
                     highlight=False)

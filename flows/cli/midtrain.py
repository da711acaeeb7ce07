"""`gymforge` commands of the mid-training room: synthesize trajectories per route, select the cold-start set."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from data_contracts.files import atomic_dir, write_frame
from flows.cli.data import DataDirOpt, require_new_dir

ROUTES = {"env": "midtrain_env", "text": "midtrain_text", "decompose": "midtrain_decompose",
          "reason": "midtrain_reason", "plan": "midtrain_plan", "longctx": "midtrain_longctx"}
"""Route name on the command line -> its stage."""
TEXT_DOMAINS = 22  # shipped domains that are not held out: --n texts are spread over them
STAGE_SFT = "sft_set"


def parse_routes(spec: str) -> list[str]:
    routes = [r.strip() for r in spec.split(",") if r.strip()]
    if not routes:
        raise typer.BadParameter(f"--routes {spec!r}: no route was given; name one or more of {', '.join(ROUTES)}")
    unknown = [r for r in routes if r not in ROUTES]
    if unknown:
        raise typer.BadParameter(f"--routes {spec!r}: unknown route(s) {unknown}; routes are {', '.join(ROUTES)}")
    return list(dict.fromkeys(routes))


ENV_ROUTES = ("env", "decompose", "reason", "plan")
"""Routes built on midtrain_env's episodes (the ones --envs feeds)."""


def check_bundles(envs: Path | None, routes: list[str]) -> str | None:
    """The bundle directory midtrain_env reads (absolute), every bundle checked before anything starts."""
    if envs is None:
        return None
    if not set(ENV_ROUTES) & set(routes):
        raise typer.BadParameter(f"--envs feeds the routes {', '.join(ENV_ROUTES)}; --routes names none of them")
    from data_contracts.stage import StageError
    from tasks.midtrain.midtrain_env import bundle_environments

    try:
        bundle_environments(envs)
    except StageError as exc:
        raise typer.BadParameter(str(exc)) from None
    return str(envs.resolve())


def route_overrides(routes: list[str], n: int | None, teacher: str | None,
                    bundles: str | None = None) -> dict[str, dict[str, Any]]:
    """Per stage: the item count --n sets, the teacher, and the environment bundles."""
    counts = {"midtrain_env": {"n_tasks": n}, "midtrain_longctx": {"n_keychain": n, "n_qa": n},
              "midtrain_text": {"texts_per_domain": None if n is None else max(1, math.ceil(n / TEXT_DOMAINS))}}
    overrides: dict[str, dict[str, Any]] = {}
    stages = {ROUTES[r] for r in routes}
    if {"decompose", "reason", "plan"} & set(routes):
        stages.add("midtrain_env")  # the augmentations start from its trajectories
    for stage in stages:
        section = {k: v for k, v in counts.get(stage, {}).items() if v is not None}
        if teacher is not None:
            section["teacher"] = teacher
        if bundles is not None and stage == "midtrain_env":
            section["bundles"] = bundles
        if section:
            overrides[stage] = section
    return overrides


def probe_teacher(teacher: str | None) -> None:
    """An engine teacher is reached once before any server or cluster starts: down or garbage is one error."""
    from inference.engine_spec import REFERENCE
    from inference.teacher import Teacher, check_teacher

    if teacher in (None, REFERENCE):
        return

    try:
        check_teacher(teacher)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    Teacher(teacher).close()


def probe_reference(reference: str) -> None:
    """A reference model other than the tiny policy scores one text before any server or cluster starts: a dead
    endpoint, one without prompt log-probabilities or a directory that is no checkpoint is one error."""
    if reference in ("tiny", "bigram"):
        return
    from tasks.midtrain.perplexity import probe

    try:
        probe(reference)
    except (RuntimeError, ValueError, OSError) as exc:
        raise typer.BadParameter(f"--reference {reference}: {exc}") from None


def keyed_selection(ref: str, section: dict[str, Any], profile: str, data_dir: Path | None) -> Any:
    """sft_set over one published route artifact named by its key, through the store: the artifact, the
    midtrain_env artifact it augments (its parents, so lineage resolves; they are candidates the proportions leave
    out), the tokenizer it was counted with and the profile's tiny_policy; only that route is selected."""
    from rich.console import Console

    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from data_contracts.runner import execute_stage
    from data_contracts.stage import StageError
    from flows.profiles import parse, stage_params
    from flows.train import published
    from tasks.midtrain.sft_set import ROUTES as SFT_ROUTES
    from tasks.midtrain.sft_set import sft_set

    root = data_root(data_dir)
    store, catalog = open_store(root), Catalog(root)
    try:
        artifact = published(catalog, store, ref)
    except StageError as exc:
        raise typer.BadParameter(f"--in {ref!r}: not a route stage ({', '.join(SFT_ROUTES)}) or sft_set, and "
                                 f"{exc}") from None
    if artifact.stage not in SFT_ROUTES:
        raise typer.BadParameter(f"--in {ref!r}: artifact {artifact.stage}/{artifact.key} is no mid-training route "
                                 f"({', '.join(SFT_ROUTES)})")
    upstream = artifact.manifest["input_keys"]
    keys = {artifact.stage: artifact.key, "tokenizer": upstream["tokenizer"]}
    if artifact.stage != "midtrain_env" and "midtrain_env" in upstream:
        keys["midtrain_env"] = upstream["midtrain_env"]
    params = parse(STAGE_SFT, stage_params(profile, {STAGE_SFT: {
        **section, "proportions": {SFT_ROUTES[artifact.stage]: 1.0}}})[STAGE_SFT])
    keys["tiny_policy"] = _materialize_with_progress(["tiny_policy"], profile, {}, data_dir)["tiny_policy"].key
    with Console().status(f"sft_set over {artifact.stage}/{artifact.key}"):
        run = execute_stage(store, catalog, sft_set.with_inputs(list(keys)), params, keys, "default")
    return store.get(STAGE_SFT, run.key)


def _materialize_with_progress(targets: list[str], profile: str, overrides: dict[str, dict[str, Any]],
                               data_dir: Path | None) -> dict[str, Any]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from flows.plan import plan_dag

    planned = plan_dag(targets, profile, "default", overrides=overrides)  # bad params fail before any start
    from flows.dag import materialize, on_stage_done  # Prefect and Dask: after the plan

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} stages"),
                  TimeElapsedColumn()) as bar:
        task = bar.add_task("materializing", total=len(planned))

        def done(row: dict[str, Any]) -> None:
            bar.update(task, advance=1, description=f"{row['stage']}: {row['status']}")

        with on_stage_done(done):
            return materialize(targets, profile=profile, overrides=overrides, data_dir=data_dir)


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""

    @app.command("midtrain")
    def midtrain(
        out: Annotated[Path, typer.Option(help="New directory: one Parquet file of kept trajectories per route.")],
        routes: Annotated[str, typer.Option(help=f"Comma-separated routes: {', '.join(ROUTES)}.")] = "env,text",
        n: Annotated[int | None, typer.Option(help="Items per route (tasks, texts, KeyChain and QA items); "
                                                   "default: the profile's.")] = None,
        teacher: Annotated[str | None, typer.Option(help="reference (offline) or openai:URL#MODEL; default: the "
                                                         "profile's.")] = None,
        envs: Annotated[Path | None, typer.Option(help="A directory of environment bundles (gymforge envgen "
                                                       "--out) for the env-based routes; default: the "
                                                       "environments artifact.")] = None,
        profile: Annotated[str, typer.Option(help="Params profile of every stage.")] = "tiny",
        data_dir: DataDirOpt = None,
    ) -> None:
        """Synthesize verified mid-training trajectories through the store, one Parquet file per route in OUT."""
        from rich.console import Console
        from rich.table import Table

        chosen = parse_routes(routes)
        if n is not None and n < 0:
            raise typer.BadParameter(f"--n {n}: must be >= 0")
        require_new_dir(out)
        bundles = check_bundles(envs, chosen)
        probe_teacher(teacher)
        artifacts = _materialize_with_progress([ROUTES[r] for r in chosen], profile,
                                               route_overrides(chosen, n, teacher, bundles), data_dir)
        table = Table(title=f"Mid-training trajectories -> {out}")
        for column in ("route", "kept", "rejected", "tokens (mean)", "most frequent rejection"):
            table.add_column(column)
        with atomic_dir(out) as tmp:
            for route in chosen:
                artifact = artifacts[ROUTES[route]]
                kept, rejected = artifact.read("trajectories"), artifact.read("rejected")
                write_frame(kept, tmp / f"{route}.parquet")
                reasons = rejected["reason"].str.split(":").list.first().value_counts(sort=True)
                top = f"{reasons[0, 0]} ({reasons[0, 1]})" if reasons.height else "-"
                mean = f"{kept['tokens'].mean():,.0f}" if kept.height else "-"
                table.add_row(route, str(kept.height), str(rejected.height), mean, top)
        Console(highlight=False).print(table)

    @app.command("select")
    def select(
        source: Annotated[str, typer.Option("--in", help="The trajectories to select from: a route stage "
                                                          f"({', '.join(ROUTES.values())}), sft_set (all), or "
                                                          "the key of a published route artifact.")],
        k: Annotated[int, typer.Option(help="Trajectories to select.")],
        out: Annotated[Path | None, typer.Option(help="Also write the selection here (.parquet or .jsonl).")] = None,
        reference: Annotated[str | None, typer.Option(help="Perplexity reference: bigram (cross-fitted on the "
                                                           "candidates), tiny (the tiny_policy artifact), "
                                                           "hf:DIR or openai:URL#MODEL (an engine returning prompt "
                                                           "log-probabilities); default: the profile's.")] = None,
        profile: Annotated[str, typer.Option(help="Params profile of every stage.")] = "tiny",
        data_dir: DataDirOpt = None,
    ) -> None:
        """Sliding-window perplexity K-Center-Greedy selection of K trajectories, through the store (sft_set)."""
        from rich.console import Console
        from rich.table import Table

        from tasks.midtrain.sft_set import ROUTES as SFT_ROUTES

        if k < 1:
            raise typer.BadParameter(f"--k {k}: must be >= 1")
        section: dict[str, Any] = {"k": k}
        if source in SFT_ROUTES:
            section["proportions"] = {SFT_ROUTES[source]: 1.0}
        if reference is not None:
            section["reference"] = reference
            probe_reference(reference)
        if source == STAGE_SFT or source in SFT_ROUTES:
            artifact = _materialize_with_progress([STAGE_SFT], profile, {STAGE_SFT: section}, data_dir)[STAGE_SFT]
        else:
            artifact = keyed_selection(source, section, profile, data_dir)
        selected, summary = artifact.read("trajectories"), artifact.read("summary")
        if out is not None:
            write_frame(selected, out)
        table = Table(title=f"sft_set {artifact.key}: {selected.height} selected")
        table.add_column("figure")
        table.add_column("value", justify="right")
        table.add_column("note")
        for name, value, note in summary.iter_rows():
            table.add_row(name, f"{value:,.4g}", note)
        Console(highlight=False).print(table)

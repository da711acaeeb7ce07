"""`gymforge envgen` commands: list domains, generate verified environments through the store, replay bundles.

``gymforge envgen --domains all --envs-per-domain 2 --out DIR`` (the callback form) and ``gymforge envgen generate
...`` are the same command: the group callback runs generation when it is given ``--out`` and no subcommand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from data_contracts.files import atomic_dir
from envgen.mutations import MUTATIONS
from flows.cli.data import DataDirOpt, require_new_dir

DomainsOpt = Annotated[str, typer.Option(help="'all' or a comma-separated list of domains.")]
EnvsOpt = Annotated[int, typer.Option(help="Verified environments per domain.")]
ProfileOpt = Annotated[str, typer.Option(help="Params profile of the stages.")]
SeedOpt = Annotated[int | None, typer.Option(help="Root seed (default: the profile's).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON (a list of objects).")]


def _print(rows: list[dict[str, Any]], title: str, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(rows))
        return
    from rich.table import Table

    table = Table(title=title)
    for column in rows[0] if rows else ():
        table.add_column(column, justify="left" if column in ("domain", "task_id", "components") else "right")
    def cell(v: Any) -> str:
        if isinstance(v, dict):
            return " ".join(f"{k}={x:g}" for k, x in v.items())
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    for row in rows:
        table.add_row(*(cell(v) for v in row.values()))
    from flows.terminal import print_table, stdout_console

    print_table(stdout_console(), table)


def generate_bundles(domains: str, envs_per_domain: int, out: Path, profile: str, seed: int | None,
                     data_dir: Path | None, as_json: bool) -> None:
    """Run domain_graphs -> environments through the store, then write one bundle per environment under OUT."""
    from envgen.bundle import write_bundles
    from envgen.domain_spec import resolve_domains
    from flows.dag import materialize

    try:
        names = resolve_domains(domains)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    require_new_dir(out)
    selection = ",".join(names)
    env_params: dict[str, Any] = {"domains": selection, "envs_per_domain": envs_per_domain, "heldout": []}
    if seed is not None:
        env_params["seed"] = seed
    overrides = {"domain_graphs": {"domains": selection}, "environments": env_params}
    artifact = materialize(["environments"], profile=profile, overrides=overrides, data_dir=data_dir)["environments"]
    envs, tasks, rejected = artifact.read("environments"), artifact.read("tasks"), artifact.read("rejected")
    with atomic_dir(out) as tmp:
        write_bundles(tmp, envs, tasks)
        rejected.write_ndjson(tmp / "rejected.jsonl")
    rows = [{"env_id": r["env_id"], "domain": r["domain"], "tools": r["n_tools"], "edges": r["n_edges"],
             "density": r["density"], "chains": r["n_chains"], "fallback": r["fallback_used"]}
            for r in envs.iter_rows(named=True)]
    _print(rows, f"{envs.height} environments, {rejected.height} rejected -> {out} (artifact {artifact.key})", as_json)


envgen = typer.Typer(help="Tool-graph environment synthesis: domains, environments, replay.")


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""
    app.add_typer(envgen, name="envgen")


@envgen.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    domains: DomainsOpt = "all",
    envs_per_domain: EnvsOpt = 2,
    out: Annotated[Path | None, typer.Option(help="Output directory; given without a subcommand, generates.")] = None,
    profile: ProfileOpt = "tiny",
    seed: SeedOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Generate environment bundles when given --out (same as `generate`), else show the subcommands."""
    if ctx.invoked_subcommand is not None:
        return
    if out is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    generate_bundles(domains, envs_per_domain, out, profile, seed, data_dir, as_json)

@envgen.command("generate")
def generate(
    out: Annotated[Path, typer.Option(help="New directory: one bundle per environment, plus rejected.jsonl.")],
    domains: DomainsOpt = "all",
    envs_per_domain: EnvsOpt = 2,
    profile: ProfileOpt = "tiny",
    seed: SeedOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build verified environments through the store (domain_graphs -> environments) and write bundles."""
    generate_bundles(domains, envs_per_domain, out, profile, seed, data_dir, as_json)

@envgen.command("list-domains")
def list_domains(domains: DomainsOpt = "all", as_json: JsonOpt = False) -> None:
    """Shipped domains with their entity, tool and edge counts and graph density."""
    from envgen.compiler import compiled
    from envgen.domain_spec import DomainSpecError, resolve_domains

    rows = []
    try:
        for name in resolve_domains(domains):
            d = compiled(name)
            rows.append({"domain": name, "entities": len(d.spec.entities), "tools": len(d.tools),
                         "writes": len(d.writes()), "edges": d.graph.number_of_edges(),
                         "density": round(d.density, 4)})
    except (DomainSpecError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    _print(rows, f"{len(rows)} domains", as_json)

@envgen.command("check")
def check(
    specs: Annotated[list[Path], typer.Argument(help="Domain YAML files to check (e.g. envgen/domains/*.yaml).")],
    envs: Annotated[int, typer.Option(help="Environments to construct and verify per spec.")] = 3,
    as_json: JsonOpt = False,
) -> None:
    """Check specs the way the stages will: parse (every problem listed), compile (enough tools), execute every
    tool, then construct and verify ENVS environments (golden replay, four mutations)."""
    from envgen.checks import check_domain_spec

    rows = []
    for path in specs:
        result = check_domain_spec(path, envs)
        if result.problems:
            typer.echo(f"{path}: {len(result.problems)} problem(s) in domain spec:\n"
                       + "\n".join(f"  - {problem}" for problem in result.problems), err=True)
        rows.append({"domain": result.domain, "tools": result.tools, "executability": result.executability,
                     "kept": result.kept, "problems": len(result.problems)})
    _print(rows, f"{len(rows)} specs checked", as_json)
    if any(row["problems"] for row in rows):
        raise typer.Exit(1)


@envgen.command("replay")
def replay_cmd(
    env_dir: Annotated[Path, typer.Argument(help="A bundle directory, or a directory of bundles.")],
    mutate: Annotated[str | None, typer.Option(help=f"Replay a mutated trajectory: {', '.join(MUTATIONS)}.")]
    = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay each task's golden trajectory (or a mutated one) in the environment and print the rewards."""
    import random

    from envgen.bundle import BundleError, bundle_dirs, read_bundle
    from envgen.environment import Environment, domain_for, replay
    from envgen.taskgen import mutate as make_mutation

    if mutate is not None and mutate not in MUTATIONS:
        raise typer.BadParameter(f"--mutate {mutate!r}: use one of {', '.join(MUTATIONS)}")
    rows = []
    try:
        for path in bundle_dirs(env_dir):
            env_rec, tasks = read_bundle(path)
            env = Environment(env_rec)
            for task in tasks:
                actions = None
                if mutate is not None:
                    actions = make_mutation(domain_for(env_rec), env_rec, task, mutate, random.Random(env_rec["seed"]))
                    if actions is None:
                        rows.append({"task_id": task["task_id"], "reward": None, "components": "n/a"})
                        continue
                ep = replay(env, task, actions)
                rows.append({"task_id": task["task_id"], "reward": ep.reward, "components": ep.components,
                             "failure": ep.failure})
            env.close()
    except (BundleError, OSError, KeyError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"{env_dir}: {exc}") from None
    title = f"{len(rows)} tasks replayed" + (f" with mutation {mutate}" if mutate else " (golden)")
    _print(rows, title, as_json)

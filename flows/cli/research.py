"""`gymforge research` commands: the deep-research harness on a query, and the research stages through the store.

- ``research run "QUERY"``: the harness with a teacher (``reference``, the offline reference teacher, or
  ``openai:URL#MODEL``, ...) over the search index, Researchers on the runtime's Dask cluster; writes the report,
  the spec, the run and its journal (the trajectory) into ``--out``, showing every role and section as it goes. A
  run started again on the same ``--out`` resumes from its journal.
- ``research tasks --n N``: research tasks with rubrics (the ``research_tasks`` stage) and what the gate kept.
- ``research trajectories``: teacher executions on those tasks (the ``research_trajectories`` stage).
- ``research qa --n N``: agent-based QA synthesis (the ``search_qa`` stage).
- ``research check REPORT.md``: every ``[cite:ID]`` of a report (from any model) checked against a search index,
  fact by fact: a table of sentence, document, verdict and reason; exit status 1 when any citation fails.

Every option is checked before a server or cluster starts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from inference.engine_spec import REFERENCE

research_app = typer.Typer(no_args_is_help=True, help="Deep research: the harness, research tasks, trajectories.")


def teacher_option(spec: str, option: str = "--teacher") -> str:
    """``reference`` or an engine spec (``inference.teacher.check_teacher``), as a CLI option error."""
    from inference.teacher import check_teacher

    try:
        return check_teacher(spec)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


class RoleProgress:
    """The harness's role calls as one progress display (inference/progress.py): calls finished, running and
    failed, the last one named; a log line per finished call."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.running: set[tuple[str, str]] = set()
        self.finished = self.failed = 0

    def __call__(self, role: str, item: str, status: str) -> None:
        if status == "running":
            self.running.add((role, item))
        else:
            self.running.discard((role, item))
            self.finished += 1
            self.failed += status == "failed"
        self.progress.update(self.finished, {"last": f"{role} {item}: {status}", "running": len(self.running),
                                             "failed": self.failed}, log=status != "running")


def _write(out: Path, run: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(run.report or f"(no report: {run.stop_reason})\n", encoding="utf-8")
    (out / "spec.json").write_text(json.dumps(run.spec, indent=1, ensure_ascii=False), encoding="utf-8")
    (out / "run.json").write_text(json.dumps(run.to_json(), indent=1, ensure_ascii=False), encoding="utf-8")


@research_app.command("run")
def run(
    query: Annotated[str, typer.Argument(help="What to research.")],
    teacher: Annotated[str, typer.Option(help="reference (offline reference teacher over the world knowledge "
                                              "graph) or an engine spec: openai:URL#MODEL, hf:DIR, vllm:DIR.")]
    = REFERENCE,
    out: Annotated[Path | None, typer.Option(help="Directory for report.md, spec.json, run.json and journal.jsonl "
                                                  "(the trajectory); an existing one resumes its run.")] = None,
    profile: Annotated[str, typer.Option(help="Profile of the world and search_index stages.")] = "tiny",
    corpus: Annotated[str | None, typer.Option(help="Corpus of the index: world (default), a directory, or "
                                                    "hotpotqa:|2wiki:|musique:PATH.")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Doc id hidden from every search (repeatable).")] = None,
    writers: Annotated[int, typer.Option(help="Planning Writers.")] = 3,
    critic_rounds: Annotated[int, typer.Option(help="Critic/Reviser cycles.")] = 1,
    judge: Annotated[str | None, typer.Option(help="Engine spec judging citation support (default: lexical).")]
    = None,
) -> None:
    """Research QUERY with the harness: plan (writers, judge, critic, reviser), Researchers in parallel on Dask,
    assembly, global and local editing; every citation checked against the corpus."""
    from pydantic import ValidationError

    from data_contracts.stage import StageError
    from tasks.research.harness.run import run_id_for
    from tasks.research.harness.session import HarnessConfig

    teacher_option(teacher)
    if judge is not None and teacher_option(judge, "--judge") == REFERENCE:
        raise typer.BadParameter("the judge must be an engine: hf:DIR, openai:URL#MODEL or vllm:DIR", param_hint="--judge")
    if not query.strip():
        raise typer.BadParameter("the query is empty: say what to research", param_hint="QUERY")
    try:
        config = HarnessConfig(writers=writers, critic_rounds=critic_rounds)
    except ValidationError as exc:
        raise typer.BadParameter("; ".join(f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg']}"
                                           for e in exc.errors())) from None
    run_id = run_id_for("adhoc", query, teacher, config)
    out = out or Path("research") / run_id
    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} is a file", param_hint="--out")
    if out.exists() and any(out.iterdir()) and not (out / "journal.jsonl").exists():
        raise typer.BadParameter(f"{out} is not empty and holds no journal.jsonl to resume", param_hint="--out")
    overrides = {"search_index": {"corpus": corpus}} if corpus else None
    run = _run_harness(query, teacher, config, out, profile, overrides, exclude or [], judge)
    _write(out, run)
    c = run.citations
    if run.status == "failed":
        raise StageError(f"research stopped: {run.stop_reason} (journal: {out / 'journal.jsonl'})")
    failed = [s["id"] for s in run.sections if s["status"] != "complete"]
    support = f"{c['rate']:.0%}" if c.get("rate") is not None else "n/a"
    typer.echo(f"{run.status}: {len(run.sections)} sections" + (f", failed: {', '.join(failed)}" if failed else "")
               + f"; {c.get('citations', 0)} citations, {support} supported by their source")
    typer.echo(f"report: {out / 'report.md'}  spec: {out / 'spec.json'}  trajectory: {out / 'journal.jsonl'}")


def _run_harness(query: str, teacher: str, config: Any, out: Path, profile: str,
                 overrides: dict[str, Any] | None, exclude: list[str], judge: str | None) -> Any:
    from distributed import Client

    from flows.dag import materialize
    from flows.runtime import Runtime
    from inference.progress import RunProgress
    from tasks.research.harness.run import run_research
    from tasks.research.research_trajectories import teacher_engine

    with Runtime() as rt:
        artifacts = materialize(["search_index", "world"], profile=profile, overrides=overrides, runtime=rt)
        engine, engine_ref = teacher_engine(teacher, artifacts["world"])
        citation_judge = teacher_engine(judge, None)[0] if judge else None
        facts = None
        if artifacts["search_index"].manifest["params"].get("corpus") == "world":
            from tasks.research.harness.knowledge import KnowledgeGraph, WorldFacts

            world = artifacts["world"]
            facts = WorldFacts(KnowledgeGraph.from_frames(world.read("entities"), world.read("relations")))
        with Client(rt.dask_address) as client, RunProgress("research", None, unit="call") as bar:
            if not isinstance(engine_ref, str):  # sent to every worker once, not with every section
                engine_ref = client.scatter(engine_ref, broadcast=True)
            try:
                return run_research(query, engine=engine, index_dir=artifacts["search_index"].directory,
                                    teacher=teacher, config=config, excluded=exclude,
                                    journal=out / "journal.jsonl", executor=client.get_executor(),
                                    engine_ref=engine_ref, progress=RoleProgress(bar),
                                    citation_judge=citation_judge, citation_facts=facts)
            finally:
                engine.close()
                if citation_judge is not None:
                    citation_judge.close()


@research_app.command("tasks")
def tasks(
    n: Annotated[int, typer.Option("--n", help="Tasks to construct (before the gate).")] = 24,
    constructions: Annotated[str, typer.Option(help="How tasks are constructed, comma-separated: brief (from "
                                                    "several documents' facts), article (from one hidden "
                                                    "article).")] = "brief,article",
    profile: Annotated[str, typer.Option(help="Profile of the stages.")] = "tiny",
    out: Annotated[Path | None, typer.Option(help="Write the kept tasks here as JSON Lines.")] = None,
) -> None:
    """Research tasks with rubrics, through the store; prints what the searchability gate and checks kept."""
    from rich.table import Table

    from flows.dag import materialize
    from tasks.research.research_tasks import CONSTRUCTIONS

    chosen = [c.strip() for c in constructions.split(",") if c.strip()]
    if n < 0:
        raise typer.BadParameter(f"--n {n}: give a number of tasks >= 0")
    if not chosen:
        raise typer.BadParameter(f"--constructions {constructions!r}: no construction was given; name brief, "
                                 "article or both")
    if unknown := sorted(set(chosen) - set(CONSTRUCTIONS)):
        raise typer.BadParameter(f"--constructions {constructions!r}: unknown construction(s) {unknown}; "
                                 f"constructions are {', '.join(CONSTRUCTIONS)}")
    artifact = materialize(["research_tasks"], profile=profile,
                           overrides={"research_tasks": {"n": n, "constructions": chosen}})["research_tasks"]
    kept, rejected = artifact.read("tasks"), artifact.read("rejected")
    table = Table(title=f"research tasks ({artifact.key})")
    for column in ("construction", "kept", "rejected", "top rejection"):
        table.add_column(column)
    for construction in chosen:
        reasons = Counter(r.split(":")[0] for r in
                          rejected.filter(rejected["construction"] == construction)["reason"].to_list())
        table.add_row(construction, str((kept["construction"] == construction).sum()),
                      str((rejected["construction"] == construction).sum()),
                      reasons.most_common(1)[0][0] if reasons else "")
    from flows.terminal import print_table, stdout_console

    print_table(stdout_console(), table)
    if out is not None:
        kept.write_ndjson(out)
        typer.echo(f"{kept.height} tasks -> {out}")


@research_app.command("trajectories")
def trajectories(
    teacher: Annotated[str, typer.Option(help="reference or an engine spec (openai:URL#MODEL, ...).")] = REFERENCE,
    max_tasks: Annotated[int | None, typer.Option(help="Run at most this many tasks.")] = None,
    judge: Annotated[str | None, typer.Option(help="Engine spec grading rubrics and citation support (default: "
                                                   "the lexical fallback).")] = None,
    profile: Annotated[str, typer.Option(help="Profile of the stages.")] = "tiny",
) -> None:
    """Teacher executions of the harness on the research tasks, through the store (journaled, resumable)."""
    from flows.dag import materialize

    teacher_option(teacher)
    if judge is not None and teacher_option(judge, "--judge") == REFERENCE:
        raise typer.BadParameter("the judge must be an engine: hf:DIR, openai:URL#MODEL or vllm:DIR", param_hint="--judge")
    if max_tasks is not None and max_tasks < 1:
        raise typer.BadParameter("--max-tasks must be at least 1")
    overrides = {"research_trajectories": {"teacher": teacher, "max_tasks": max_tasks, "judge": judge}}
    artifact = materialize(["research_trajectories"], profile=profile, overrides=overrides)["research_trajectories"]
    runs = artifact.read("runs")
    status = Counter(runs["status"].to_list())
    support, score = runs["citation_support"].mean(), runs["rubric_score"].mean()
    typer.echo(f"{runs.height} runs ({', '.join(f'{k} {v}' for k, v in sorted(status.items()))}); "
               f"{artifact.read('trajectories').height} trajectories kept, {artifact.read('rejected').height} "
               f"filtered; citation support {support or 0:.2f}, rubric score {score or 0:.2f} ({artifact.key})")


@research_app.command("qa")
def qa(
    n: Annotated[int, typer.Option("--n", help="Items to synthesize.")] = 40,
    engine: Annotated[str, typer.Option(help="Answer agent: reference or an engine spec.")] = REFERENCE,
    profile: Annotated[str, typer.Option(help="Profile of the stages.")] = "tiny",
) -> None:
    """Agent-based QA synthesis over the search index, through the store; prints items per difficulty."""
    from flows.dag import materialize

    teacher_option(engine, "--engine")
    if n < 0:
        raise typer.BadParameter("--n must be >= 0")
    artifact = materialize(["search_qa"], profile=profile,
                           overrides={"search_qa": {"n": n, "answer_engine": engine}})["search_qa"]
    items = artifact.read("items")
    grades = Counter(items["difficulty"].to_list())
    typer.echo(f"{items.height} items ({', '.join(f'{k} {v}' for k, v in sorted(grades.items()))}), "
               f"{artifact.read('rejected').height} rejected ({artifact.key})")


@research_app.command("check")
def check(
    report: Annotated[Path, typer.Argument(help="A Markdown report whose sentences cite [cite:DOC_ID].")],
    index: Annotated[str | None, typer.Option(help="The search index: a search_index artifact key (see `gymforge "
                                                   "artifacts ls`) or an index directory; default: the catalog's "
                                                   "only one.")] = None,
    judge: Annotated[str | None, typer.Option(help="Engine spec deciding support past the lexical pre-filter "
                                                   "(openai:URL#MODEL, ...); default: the fact-level check.")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="The verdicts as JSON.")] = False,
) -> None:
    """Check a report's citations against a search index: does each cited document state what its sentence claims
    (numbers for the same attribute, relations in the same direction, no negation it lacks)? Exits 1 when one does
    not."""
    from dataclasses import asdict

    from rich.markup import escape
    from rich.table import Table

    from flows.terminal import print_table, stdout_console
    from tasks.research.harness.citations import check_citations

    if not report.is_file():
        raise typer.BadParameter(f"{report}: no such file", param_hint="REPORT")
    if judge is not None and teacher_option(judge, "--judge") == REFERENCE:
        raise typer.BadParameter("the judge must be an engine: hf:DIR, openai:URL#MODEL or vllm:DIR", param_hint="--judge")
    try:
        text = report.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{report}: not UTF-8 text", param_hint="REPORT") from None
    opened, facts = _open_index(index)
    engine = None
    if judge is not None:
        from tasks.research.research_trajectories import teacher_engine

        engine = teacher_engine(judge, None)[0]
    try:
        result = check_citations(text, opened, judge=engine, facts=facts)
    finally:
        if engine is not None:
            engine.close()
    failed = [c for c in result.checks if not c.supported]
    summary = {**result.summary(), "unsupported": len(failed), "index": str(opened.directory)}
    if as_json:
        rows = [{k: v for k, v in asdict(c).items() if k != "section"} for c in result.checks]
        typer.echo(json.dumps({"summary": summary, "citations": rows}, indent=1, ensure_ascii=False))
    else:
        table = Table(title=f"citations of {report}")
        for column in ("#", "sentence", "document", "verdict", "reason"):
            table.add_column(column, overflow="fold")
        for i, c in enumerate(result.checks, start=1):
            style = "green" if c.supported else "red"
            table.add_row(str(i), escape(c.sentence), escape(c.doc_id), f"[{style}]{c.verdict}[/{style}]",
                          escape(c.reason))
        print_table(stdout_console(), table)
        typer.echo(f"{result.total} citations: {result.supported} supported, {len(failed)} not "
                   f"({len(result.dangling)} to a missing or excluded document); {result.uncited} sentences "
                   "without a citation")
    if not result.total:
        typer.echo("the report cites nothing ([cite:DOC_ID] after a sentence)", err=True)
    if failed or not result.total:
        raise typer.Exit(1)


def _open_index(index: str | None) -> tuple[Any, Any]:
    """The index (a key of the catalog or a directory) and, for an index of the world corpus, the world's facts."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import data_root, open_store
    from data_contracts.stage import StageError
    from tasks.research.search import SearchIndex

    if index is not None and Path(index).is_dir():
        try:
            return SearchIndex.open(index), None
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--index") from None
    catalog = Catalog(data_root())
    keys = [entry.key for entry in catalog.entries(stage="search_index", status="published")
            if index is None or entry.key == index]
    if index is not None and not keys:
        raise typer.BadParameter(f"{index!r}: neither an index directory nor a published search_index key; list "
                                 "them with `gymforge artifacts ls`", param_hint="--index")
    if len(keys) != 1:
        found = f"{len(keys)} ({', '.join(keys)})" if keys else "none"
        raise typer.BadParameter(f"the catalog holds {found} published search indexes: name one with --index KEY "
                                 "or an index directory", param_hint="--index")
    store = open_store(catalog.root)
    artifact = store.get("search_index", keys[0])
    if artifact is None:
        raise StageError(f"the catalog lists search_index/{keys[0]} but its files are gone; run "
                         "`gymforge artifacts fsck --repair`")
    opened = SearchIndex.open(artifact.directory)
    world_key = artifact.manifest.get("inputs", {}).get("world")
    world = store.get("world", world_key) if world_key and artifact.manifest["params"].get("corpus") == "world" \
        else None
    if world is None:
        return opened, None
    from tasks.research.harness.knowledge import KnowledgeGraph, WorldFacts

    return opened, WorldFacts(KnowledgeGraph.from_frames(world.read("entities"), world.read("relations")))


def register(app: typer.Typer) -> None:
    """Add this room's commands to the main app."""
    app.add_typer(research_app, name="research")

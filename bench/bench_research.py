"""Deep research on the world corpus: section research on 1 and 2 Dask workers side by side (the parallel
speed-up), the citation support rate and rubric score of reference-teacher reports on research tasks, the share
of tasks the searchability gate keeps, and agent-based QA synthesis.

The dispatch arms research the same fixed specs (planned once) with fresh journals: an in-process thread (the
serial reference), a LocalCluster of 1 and of 2 single-threaded worker processes, each warmed up (index opened,
teacher scattered) before it is timed; the figure is the median of ``--repeats`` runs of every arm, interleaved.
Two teachers: the reference teacher as it is (CPU-bound, a few milliseconds per call) and the same with a fixed
delay per engine call, standing in for the latency of a served model.
Search queries/s and index build times on 100,000 world documents are bench_search's.

    .venv/bin/python -m bench.bench_research [--entities 20000] [--specs 3] [--repeats 3] [--latency-ms 100]
        [--tasks 40] [--runs 20] [--qa 40] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from collections import Counter
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from bench import report


def world(entities: int, directory: Path) -> tuple[dict[str, pl.DataFrame], Path, float]:
    from tasks.longctx.world import world as world_stage
    from tasks.research.search import SearchIndex, load_corpus

    frames = world_stage.run({}, world_stage.parse_params({"n_entities": entities, "n_questions": 0}), "bench")
    start = time.perf_counter()
    SearchIndex.build(load_corpus(frames["documents"]), directory / "index")
    return frames, directory / "index", time.perf_counter() - start


def plan_specs(teacher: Any, index_dir: Path, queries: list[str]) -> list[Any]:
    from tasks.research.harness.research_spec import ResearchSpec
    from tasks.research.harness.run import run_research

    specs = []
    for q in queries:
        run = run_research(q, engine=teacher, index_dir=index_dir, teacher="reference")
        specs.append((q, ResearchSpec.model_validate(run.spec)))
    return specs


def dispatch_all(teacher: Any, engine_ref: Any, index_dir: Path, specs: list[Any], executor: Executor) -> float:
    """Seconds to research every section of every spec on ``executor`` (fresh in-memory journals)."""
    from tasks.research.harness.researchers import dispatch
    from tasks.research.harness.roles import open_index
    from tasks.research.harness.session import HarnessConfig, Journal, Session

    start = time.perf_counter()
    for i, (q, spec) in enumerate(specs):
        session = Session(teacher, open_index(str(index_dir)), HarnessConfig(), Journal(None, {"run": i}),
                          engine_ref=engine_ref)
        outcomes = dispatch(session, q, spec, "plan", executor)
        assert all(o.status == "complete" for o in outcomes.values()), outcomes
    return time.perf_counter() - start


class Latency:
    """The reference teacher with every engine call delayed: a stand-in for a served model's latency (an
    OpenAI-compatible teacher spends its time waiting on the server). Defined here, so Dask pickles it by value."""

    policy_version = 0

    def __init__(self, inner: Any, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    def generate(self, requests: Any) -> Any:
        time.sleep(self.seconds)
        return self.inner.generate(requests)

    def close(self) -> None:
        pass


ARMS = ("thread", "dask1", "dask2")


def speedup(teachers: dict[str, Any], index_dir: Path, specs: list[Any], repeats: int) -> dict[str, dict[str, float]]:
    """Median seconds per (teacher, arm)."""
    from distributed import Client, LocalCluster

    times = {(t, a): [] for t in teachers for a in ARMS}
    clusters = {a: LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                                silence_logs=logging.WARNING) for a, n in (("dask1", 1), ("dask2", 2))}
    try:
        clients = {a: Client(cluster) for a, cluster in clusters.items()}
        with ThreadPoolExecutor(max_workers=1) as thread:
            executors: dict[str, Executor] = {"thread": thread, **{a: c.get_executor() for a, c in clients.items()}}
            for label, teacher in teachers.items():
                refs = {"thread": teacher, **{a: c.scatter(teacher, broadcast=True) for a, c in clients.items()}}
                for arm in ARMS:  # warm-up: workers import, open the index, unpickle the teacher
                    dispatch_all(teacher, refs[arm], index_dir, specs[:1], executors[arm])
                for _ in range(repeats):
                    for arm in ARMS:
                        times[label, arm].append(dispatch_all(teacher, refs[arm], index_dir, specs, executors[arm]))
        for c in clients.values():
            c.close()
    finally:
        for cluster in clusters.values():
            cluster.close()
    return {t: {a: statistics.median(times[t, a]) for a in ARMS} for t in teachers}


def shuffled_support(report_text: str, index_dir: Path, seed: int) -> float:
    """The negative control: the report's support rate with every citation moved to another document the
    report cites (the wrong source)."""
    import random

    from tasks.research.harness.citations import check_citations
    from tasks.research.harness.roles import open_index
    from tasks.research.harness.text import CITATION

    cited = sorted(set(CITATION.findall(report_text)))
    if len(cited) < 2:
        return float("nan")
    moved = cited[1:] + cited[:1]
    random.Random(seed).shuffle(moved)
    swap = dict(zip(cited, moved, strict=True))
    wrong = CITATION.sub(lambda m: f" [cite:{swap[m.group(1)]}]", report_text)
    return check_citations(wrong, open_index(str(index_dir))).rate or 0.0


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its normal 95% interval."""
    if len(values) < 2:
        return (values[0] if values else float("nan")), float("nan")
    return statistics.fmean(values), 1.96 * statistics.stdev(values) / len(values) ** 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=20_000, help="world entities: one document each")
    parser.add_argument("--specs", type=int, default=3, help="research specs dispatched per timed arm run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per dispatch arm (median)")
    parser.add_argument("--latency-ms", type=int, default=100, help="delay per engine call of the latency arm")
    parser.add_argument("--tasks", type=int, default=40, help="research tasks constructed (before the gate)")
    parser.add_argument("--runs", type=int, default=20, help="kept tasks the reference teacher researches")
    parser.add_argument("--qa", type=int, default=40, help="agent-based QA items to synthesize")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()

    from data_contracts.stage import FrameArtifact
    from tasks.research.harness.knowledge import KnowledgeGraph
    from tasks.research.harness.reference import ReferenceTeacher
    from tasks.research.harness.rubric import Rubric, grade
    from tasks.research.harness.run import run_research
    from tasks.research.research_tasks import research_tasks
    from tasks.research.search_qa import search_qa

    with tempfile.TemporaryDirectory(prefix="bench-research-") as tmp:
        frames, index_dir, build_s = world(args.entities, Path(tmp))
        kg = KnowledgeGraph.from_frames(frames["entities"], frames["relations"])
        teacher = ReferenceTeacher(kg)
        orgs = frames["entities"].filter(pl.col("type") == "organization")["name"].to_list()
        queries = [f"Write a report on {name}: its founder, its people and what it produced." for name in orgs]
        specs = plan_specs(teacher, index_dir, queries[: args.specs])
        sections = sum(len(s.leaves()) for _, s in specs)
        delayed = f"reference teacher + {args.latency_ms} ms per engine call"
        timing = speedup({"reference teacher": teacher, delayed: Latency(teacher, args.latency_ms / 1000)},
                         index_dir, specs, args.repeats)
        print(json.dumps({"sections": sections, **timing}))

        inputs = {"world": FrameArtifact(frames), "search_index": FrameArtifact({}, directory=index_dir)}
        built = research_tasks.run(inputs, research_tasks.parse_params({"n": args.tasks}), "bench")
        kept, rejected = built["tasks"], built["rejected"]
        reasons = Counter(r.split(":")[0].split(" (")[0] for r in rejected["reason"].to_list())
        by_construction = {c: (int((kept["construction"] == c).sum()),
                               int((kept["construction"] == c).sum() + (rejected["construction"] == c).sum()))
                           for c in ("brief", "article")}

        results: dict[str, list[dict[str, float]]] = {"brief": [], "article": []}
        run_s = []
        for task in kept.head(args.runs).iter_rows(named=True):
            start = time.perf_counter()
            run = run_research(task["query"], engine=teacher, index_dir=index_dir, teacher="reference",
                               task_id=task["task_id"], excluded=list(task["excluded_doc_ids"]))
            run_s.append(time.perf_counter() - start)
            graded = grade(run.report, Rubric.model_validate_json(task["rubric"]))
            results[task["construction"]].append({"support": run.citations.get("rate") or 0.0,
                                                  "score": graded.score, "complete": run.status == "complete",
                                                  "citations": run.citations.get("citations", 0),
                                                  "shuffled": shuffled_support(run.report, index_dir, len(run_s))})
        qa = search_qa.run(inputs, search_qa.parse_params({"n": args.qa}), "bench")
    items = qa["items"]
    grades = Counter(items["difficulty"].to_list())
    conflicts = sum('"multi_answer"' in f for f in items["fsm"].to_list())
    every = [r for rows in results.values() for r in rows]

    def row(name: str, rows: list[dict[str, float]]) -> str:
        support, support_ci = mean_ci([r["support"] for r in rows])
        score, score_ci = mean_ci([r["score"] for r in rows])
        shuffled, shuffled_ci = mean_ci([r["shuffled"] for r in rows])
        return (f"| {name} | {len(rows)} | {sum(r['complete'] for r in rows)} | "
                f"{statistics.fmean(r['citations'] for r in rows) if rows else 0:.0f} | "
                f"{support:.3f} ± {support_ci:.3f} | {min((r['support'] for r in rows), default=0):.3f} | "
                f"{shuffled:.3f} ± {shuffled_ci:.3f} | {score:.3f} ± {score_ci:.3f} |")

    lines = [
        "",
        "## Deep research: parallel sections, reference-teacher reports, the gate, QA (bench_research.py)",
        "",
        (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, shared with "
         f"other jobs (load average {os.getloadavg()[0]:.1f} at the end). World: {args.entities:,} entities, one "
         f"document each (index built in {build_s:.1f} s). Teacher: the offline reference teacher; the latency "
         "arm delays each of its engine calls, a stand-in for a served model. Section research: "
         f"{len(specs)} specs, {sections} sections, researched by each arm in turn ({args.repeats} interleaved "
         "runs, median; every arm warmed up first; the teacher scattered to the workers once)."),
        "",
        "| teacher | arm | seconds | sections/s | speed-up over 1 worker |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {t} | {label} | {arms[a]:.2f} | {sections / arms[a]:.1f} | {arms['dask1'] / arms[a]:.2f} |"
          for t, arms in timing.items()
          for a, label in (("thread", "in-process thread"), ("dask1", "Dask, 1 worker"),
                           ("dask2", "Dask, 2 workers"))),
        "",
        (f"Research tasks: {args.tasks} constructed, {kept.height} kept by the searchability gate and the checks "
         f"({kept.height / max(args.tasks, 1):.0%}); brief construction {by_construction['brief'][0]}/"
         f"{by_construction['brief'][1]}, article construction {by_construction['article'][0]}/"
         f"{by_construction['article'][1]}. Rejections: "
         + ", ".join(f"{k} {v}" for k, v in reasons.most_common()) + "."),
        "",
        (f"Reference-teacher reports on {len(every)} kept tasks ({statistics.fmean(run_s):.2f} s per run, serial): "
         "citation support rate (supported citations / citations, lexical check), the same with every citation "
         "moved to another document the report cites (a negative control: the check must reject wrong sources), "
         "and rubric score (ResearchRubrics weighting, lexical fallback grader); mean ± 95% interval half-width "
         "over tasks. Complete: every section researched (an article task's own document is excluded, so a "
         "section on it may find no evidence and fail)."),
        "",
        "| construction | runs | complete | citations/run | citation support | lowest | wrong-source control | rubric score |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *(row(construction, rows) for construction, rows in results.items()),
        row("all", every),
        "",
        (f"Agent-based QA synthesis: {items.height} items, {qa['rejected'].height} rejected; difficulty by the "
         "reference search agent's accuracy (4 samples): " + ", ".join(f"{k} {v}" for k, v in sorted(grades.items()))
         + f"; {conflicts} items resolved a multi-answer conflict; mean {items['attempts'].mean():.2f} syntheses, "
         f"{items['n_constraints'].mean():.2f} constraints per question."),
    ]
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

"""Researchers (LongCat-DeepResearch, section 3.1): one per dispatchable section, run concurrently.

Each gets the query, the whole ResearchSpec and its one assignment, and nothing any other Researcher wrote; it
gathers its own evidence in its own context and writes its section with citations. Jobs go to any
``concurrent.futures.Executor``: a Dask cluster's (``client.get_executor()``), whose workers receive the job
pickled and the teacher as a separate argument (an engine spec they load once, or a picklable engine such as the
reference teacher — best scattered to the workers once, ``client.scatter(teacher, broadcast=True)``, since a
Dask future passed as an argument reaches the worker without being sent again), the index by its directory,
opened once per worker process; or a thread pool in-process.

A section whose output is invalid (no citation, a citation to a document the corpus lacks or the task excludes,
a heading) is researched again, up to ``section_attempts`` runs; an engine failure is retried inside the job. A
section that never succeeds is marked failed with its reason; the other sections are kept.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache

from inference.engine import Engine
from tasks.research.harness import prompts
from tasks.research.harness.citations import check_citations
from tasks.research.harness.research_spec import ResearchSpec
from tasks.research.harness.roles import RoleCall, RoleConfig, RoleResult, open_index, run_role
from tasks.research.harness.session import Session
from tasks.research.search import SearchIndex

_HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s", re.MULTILINE)


@dataclass(frozen=True)
class SectionJob:
    """What a worker needs to research one section (beside the teacher), and nothing about the others."""

    index_dir: str
    call: RoleCall
    config: RoleConfig


@dataclass(frozen=True)
class SectionOutcome:
    section_id: str
    text: str | None
    status: str
    """complete | failed"""
    call_id: str
    reason: str | None = None


def research_section(job: SectionJob, engine: Engine | str) -> RoleResult:
    """Run one Researcher (in a worker process or thread) with ``engine``, or the engine a spec names."""
    return run_role(_engine(engine) if isinstance(engine, str) else engine, open_index(job.index_dir), job.call,
                    job.config)


@lru_cache(maxsize=4)
def _engine(spec: str) -> Engine:
    from inference.engine_factory import load_engine

    return load_engine(spec)


def section_problems(text: str | None, index: SearchIndex, excluded: Collection[str]) -> list[str]:
    """Why a Researcher's (or Local Editor's) section text cannot be used; empty when it can."""
    if not text or not text.strip():
        return ["the section is empty"]
    problems = []
    if _HEADING_LINE.search(text):
        problems.append("the section carries a heading (the report adds the section's own)")
    report = check_citations(text, index, excluded=excluded)
    if not report.total:
        problems.append("the section cites no document")
    for c in report.dangling:
        why = "the task excludes it" if c.verdict == "excluded" else "the collection has no such document"
        problems.append(f"it cites {c.doc_id!r}, but {why}")
    return problems


def dispatch(session: Session, query: str, spec: ResearchSpec, spec_call: str,
             executor: Executor | None = None) -> dict[str, SectionOutcome]:
    """Research every dispatchable section; outcome per section id, in spec order."""
    leaves = spec.leaves()
    spec_data = spec.model_dump()
    outcomes: dict[str, SectionOutcome] = {}
    attempts = {s.id: 0 for s in leaves}
    pending: dict[Future[RoleResult], str] = {}
    owned = executor is None
    pool = executor or ThreadPoolExecutor(max_workers=session.config.researcher_workers)

    def submit(section_id: str) -> None:
        attempts[section_id] += 1
        suffix = "" if attempts[section_id] == 1 else f"#{attempts[section_id]}"
        assignment = spec.section(section_id).model_dump()
        call = session.role_call(f"research/{section_id}{suffix}", "researcher",
                                 prompts.researcher_input(query, spec_data, assignment), branch=section_id,
                                 depends_on=[spec_call])
        recorded = session.journal.call(call.call_id)
        if recorded is not None:
            settle(recorded)
            return
        session.progress("researcher", section_id, "running")
        config = session.config.roles
        config = config.model_copy(update={"agent": config.agent.model_copy(
            update={"seed": config.agent.seed + 1000 * (attempts[section_id] - 1)})})
        job = SectionJob(str(session.index.directory), call, config)
        pending[pool.submit(research_section, job, session.engine_ref)] = section_id

    def settle(result: RoleResult) -> None:
        section_id = str(result.branch)
        problems = ([result.error or "failed"] if result.status == "failed"
                    else section_problems(result.output, session.index, session.excluded))
        if not problems:
            outcomes[section_id] = SectionOutcome(section_id, result.output, "complete", result.call_id)
        elif result.status == "failed" or attempts[section_id] >= session.config.section_attempts:
            outcomes[section_id] = SectionOutcome(section_id, None, "failed", result.call_id, "; ".join(problems))
        session.note("section", section=section_id, call_id=result.call_id,
                     status="complete" if not problems else "rejected", problems=problems)
        if section_id not in outcomes:
            submit(section_id)

    try:
        for leaf in leaves:
            submit(leaf.id)
        while pending:
            future = next(as_completed(list(pending)))
            pending.pop(future)
            result = future.result()
            session.record(result)
            settle(result)
    finally:
        if owned:
            pool.shutdown(wait=True)
    return {leaf.id: outcomes[leaf.id] for leaf in leaves}

"""The deep-research harness (LongCat-DeepResearch, section 3.1): plan, research, assemble, edit.

``run_research(query, engine=..., index_dir=...)`` runs the roles in order — Planning Writers, Planning Judge,
Critic/Reviser cycles (planning.py), Researchers in parallel (researchers.py), mechanical assembly, the Global
Editor and Local Editors (editors.py) — journaling every call (session.py), and returns a :class:`ResearchRun`:
the final report, the candidate and final specs, the sections with their citations checked against the corpus,
the editorial decisions and every role call. Its status is ``complete`` (every section researched), ``partial``
(some sections failed; the others are kept) or ``failed`` (the run stopped: its ``stop_reason`` says why).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from inference.engine import Engine
from tasks.research.harness.citations import check_citations
from tasks.research.harness.editors import assemble, edit
from tasks.research.harness.planning import plan
from tasks.research.harness.research_spec import ResearchSpecError
from tasks.research.harness.researchers import dispatch
from tasks.research.harness.roles import RoleResult, open_index
from tasks.research.harness.session import HARNESS, HarnessConfig, Journal, Progress, ResearchStop, Session
from tasks.research.search.support import Facts

RunStatus = Literal["complete", "partial", "failed"]


@dataclass
class ResearchRun:
    run_id: str
    task_id: str
    query: str
    teacher: str
    harness: str
    status: RunStatus
    report: str = ""
    spec: dict[str, Any] | None = None
    candidate_specs: list[dict[str, Any]] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)
    """Per dispatchable section: id, title, status, call id, text (after editing), reason when failed."""
    directives: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    citations: dict[str, Any] = field(default_factory=dict)
    """The final report's citation check: counts, support rate and every check."""
    stop_reason: str | None = None
    excluded: list[str] = field(default_factory=list)
    calls: list[RoleResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "calls"},
                "calls": [c.to_json() for c in self.calls]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResearchRun:
        return cls(**{**data, "calls": [RoleResult.from_json(c) for c in data.get("calls", [])]})


def run_id_for(task_id: str, query: str, teacher: str, config: HarnessConfig) -> str:
    digest = hashlib.sha256(f"{task_id}\n{query}\n{teacher}\n{config.fingerprint()}\n{HARNESS}".encode())
    return f"run-{digest.hexdigest()[:16]}"


def run_research(query: str, *, engine: Engine, index_dir: str | Path, teacher: str,
                 config: HarnessConfig | None = None, task_id: str = "adhoc", excluded: Sequence[str] = (),
                 journal: str | Path | None = None, executor: Executor | None = None,
                 engine_ref: Any = None, progress: Progress | None = None,
                 citation_judge: Engine | None = None, citation_facts: Facts | None = None) -> ResearchRun:
    """Run the harness on ``query`` with ``engine`` as every role's teacher (``teacher`` names it in the records;
    ``engine_ref`` is what executor workers get for it: a spec string, a picklable engine, or a Dask future of
    one). A journal file makes the run resumable: a finished run is returned as recorded, an interrupted one
    continues where it stopped."""
    config = config or HarnessConfig()
    if not query.strip():
        raise ResearchStop("the query is empty: say what to research")
    run_id = run_id_for(task_id, query, teacher, config)
    header = {"run_id": run_id, "task_id": task_id, "query": query, "teacher": teacher, "harness": HARNESS,
              "config": config.fingerprint(), "excluded": sorted(excluded)}
    log = Journal(journal, header)
    if (end := log.last("end")) is not None:
        return ResearchRun.from_json(end["run"])
    index = open_index(str(index_dir))
    session = Session(engine, index, config, log, excluded=excluded, engine_ref=engine_ref, progress=progress)
    run = ResearchRun(run_id, task_id, query, teacher, HARNESS, "failed", excluded=sorted(excluded))
    try:
        planned = plan(session, query)
        run.spec, run.candidate_specs = planned.spec.model_dump(), planned.candidates
        outcomes = dispatch(session, query, planned.spec, planned.spec_call, executor)
        done = [o for o in outcomes.values() if o.status == "complete"]
        if not done:
            raise ResearchStop("every section failed: " + "; ".join(f"{o.section_id}: {o.reason}"
                                                                    for o in outcomes.values()))
        texts = {s: o.text for s, o in outcomes.items() if o.text}
        if config.edit:
            edited = edit(session, query, planned.spec, outcomes, [o.call_id for o in done])
            texts, run.directives, run.decisions = edited.texts, edited.directives, edited.decisions
        run.report = assemble(planned.spec, outcomes, texts)
        run.sections = [{"id": s.id, "title": s.title, "status": outcomes[s.id].status,
                         "call_id": outcomes[s.id].call_id, "text": texts.get(s.id),
                         "reason": outcomes[s.id].reason} for s in planned.spec.leaves()]
        report = check_citations(run.report, index, excluded=excluded, threshold=config.support_threshold,
                                 judge=citation_judge, facts=citation_facts)
        run.citations = {**report.summary(), "checks": [asdict(c) for c in report.checks]}
        run.status = "complete" if len(done) == len(outcomes) else "partial"
    except (ResearchStop, ResearchSpecError) as exc:
        run.stop_reason = str(exc)
    run.calls = log.calls()
    log.append({"event": "end", "status": run.status, "run": run.to_json()})
    return run

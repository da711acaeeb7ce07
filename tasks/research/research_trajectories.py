"""Stage `research_trajectories`: teacher executions of the research harness on the research tasks
(LongCat-DeepResearch, section 3.2), recorded append-only and resumably, filtered, written as trajectories.

Each task's run is journaled as it goes (tasks/research/harness/session.py) under ``journal_dir``, one file per run
(named by the run id: task, query, teacher and harness settings), so a stage killed mid-run (a teacher server
gone at task 37) resumes on its next run where it stopped, reusing every recorded role call. Each finished run is
scored (rubric grading: the task's rubric, a judge engine or the lexical fallback; citation support rate) and
written: every role call whose trajectory passes the filters (role identity, tool-call/response closure,
artifact validity) as a ``trajectory`` row, the others to ``rejected``; runs keep complete / partial / failed
distinct in ``runs``, and every call, with its role, branch, dependencies, teacher and harness, in ``calls``.

The teacher is ``reference`` (the offline deterministic reference teacher over the world knowledge graph, named
so) or any engine spec: ``openai:URL#MODEL`` (a vLLM server at scale), ``hf:DIR``, ``vllm:DIR``. Inside the stage
(itself a task on a Dask worker, importing no Dask) a run's Researchers share a thread pool; ``gymforge research
run`` puts them on the cluster's workers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import polars as pl
from pydantic import Field

from data_contracts.objectstore import local_home
from data_contracts.roots import data_root
from data_contracts.schemas import in_set
from data_contracts.stage import REJECTED, Artifact, Check, Params, stage
from envgen.records import TRAJECTORY
from envgen.trajectory_standard import habit_problem, standard_contract
from inference.engine import Engine
from tasks.midtrain.trajectory_stages import token_counter
from tasks.records import TRAJECTORY_REJECTED
from tasks.research.harness.knowledge import KnowledgeGraph, WorldFacts
from tasks.research.harness.reference import ReferenceTeacher
from tasks.research.harness.roles import open_index
from tasks.research.harness.rubric import Rubric, grade
from tasks.research.harness.run import ResearchRun, run_id_for, run_research
from tasks.research.harness.session import HarnessConfig
from tasks.research.harness.trajectories import trajectory_rows
from tasks.research.records import RESEARCH_CALL, RESEARCH_RUN

STAGE = "research_trajectories"
from inference.engine_spec import REFERENCE


class ResearchTrajectoryParams(Params):
    teacher: str = Field(REFERENCE, description="reference (the offline reference teacher over the world knowledge "
                                                "graph) or an engine spec: openai:URL#MODEL, hf:DIR, vllm:DIR")
    max_tasks: int | None = Field(None, gt=0, description="run at most this many tasks (in task id order)")
    harness: HarnessConfig = Field(default_factory=HarnessConfig, description="the harness's settings")
    judge: str | None = Field(None, description="engine spec grading rubrics and citation support; none: the "
                                                "lexical fallback")
    tokenizer: str = Field("default", description="tokenizer counting each trajectory's tokens: 'default' (the "
                                                  "tokenizer artifact) or a local tokenizer directory")
    journal_dir: str = Field("", description="where runs are journaled (resumable); empty: "
                                             "$GYMFORGE_DATA/journals/research_trajectories")

    def journal_root(self) -> Path:
        if self.journal_dir:
            return Path(self.journal_dir)
        # journals are appended to, so an object-store data root keeps them in its local home
        return local_home(data_root()) / "journals" / STAGE


def teacher_engine(spec: str, world: Artifact | None) -> tuple[Engine, Engine | str]:
    """The teacher and what executor workers get for it (the picklable reference teacher, or the spec)."""
    if spec == REFERENCE:
        if world is None:
            raise ValueError("the reference teacher needs the world's knowledge graph")
        teacher = ReferenceTeacher(KnowledgeGraph.from_frames(world.read("entities"), world.read("relations")))
        return teacher, teacher
    from inference.engine_factory import load_engine

    return load_engine(spec), spec


def _assistant_only(frame: pl.DataFrame) -> list[bool]:
    return [any(t and m.get("role") != "assistant" for t, m in zip(train, json.loads(messages), strict=True))
            for train, messages in zip(frame["train"].to_list(), frame["messages"].to_list(), strict=True)]


TRAJECTORIES = standard_contract(["research"], checks=(
    Check("assistant_only", _assistant_only, description="only assistant messages are trained on"),))
"""The trajectory standard every trajectory stage holds to (``envgen.trajectory_standard``), and the harness's
training turns."""


def run_row(run: ResearchRun, rubric: Rubric, judge: Engine | None) -> dict[str, object]:
    graded = grade(run.report, rubric, judge) if run.report else None
    c = run.citations
    return {"run_id": run.run_id, "task_id": run.task_id, "query": run.query, "teacher": run.teacher,
            "harness": run.harness, "status": run.status, "stop_reason": run.stop_reason, "report": run.report,
            "spec": json.dumps(run.spec), "candidate_specs": json.dumps(run.candidate_specs),
            "sections": json.dumps(run.sections), "directives": json.dumps(run.directives),
            "decisions": json.dumps(run.decisions), "citations": c.get("citations", 0),
            "citations_supported": c.get("supported", 0), "citation_support": c.get("rate"),
            "dangling_citations": c.get("dangling", 0), "rubric_score": graded.score if graded else None,
            "rubric_verdicts": json.dumps(graded.verdicts if graded else {}), "n_calls": len(run.calls)}


# 2: names checked in citations; 3: compact tool results; 4: citations checked fact by fact, against the world's
# facts too; 5: a citation after the period checked with its sentence, comparisons name each figure's attribute
# 6: held to the trajectory standard (a call breaking a habit goes to rejected)
@stage(name=STAGE, version="6", inputs=("research_tasks", "search_index", "world", "tokenizer"),
       params=ResearchTrajectoryParams,
       outputs={"trajectories": TRAJECTORIES, "runs": RESEARCH_RUN.contract(expectations=(
           in_set("status", ["complete", "partial", "failed"]),)), "calls": RESEARCH_CALL.contract(),
           REJECTED: TRAJECTORY_REJECTED.contract()})
def research_trajectories(inputs: Mapping[str, Artifact], params: ResearchTrajectoryParams,
                          partition: str) -> dict[str, pl.DataFrame]:
    """Run the research harness with the teacher on every research task, journaled and resumable; write the
    role calls that pass the filters as trajectories."""
    from rich.progress import Progress

    tasks = inputs["research_tasks"].read("tasks").sort("task_id")
    if params.max_tasks is not None:
        tasks = tasks.head(params.max_tasks)
    index_dir = str(inputs["search_index"].directory)
    index = open_index(index_dir)
    engine, engine_ref = teacher_engine(params.teacher, inputs["world"])
    world_corpus = inputs["search_index"].manifest.get("params", {}).get("corpus", "world") == "world"
    facts = WorldFacts(KnowledgeGraph.from_frames(inputs["world"].read("entities"), inputs["world"].read(
        "relations"))) if world_corpus else None
    judge = None
    if params.judge:
        from inference.engine_factory import load_engine

        judge = load_engine(params.judge)
    kept, rejected, calls, runs = [], [], [], []
    count = token_counter(params, inputs)  # reads only its tokenizer field
    root = params.journal_root()
    try:
        with Progress(transient=True, disable=not os.isatty(2)) as bar:
            progress = bar.add_task(STAGE, total=tasks.height)
            for task in tasks.iter_rows(named=True):
                run_id = run_id_for(task["task_id"], task["query"], params.teacher, params.harness)
                run = run_research(task["query"], engine=engine, index_dir=index_dir, teacher=params.teacher,
                                   config=params.harness, task_id=task["task_id"],
                                   excluded=list(task["excluded_doc_ids"]), journal=root / f"{run_id}.jsonl",
                                   engine_ref=engine_ref, citation_judge=judge, citation_facts=facts)
                topic = json.loads(task["profile"]).get("topic")
                good, bad, call_rows = trajectory_rows(run, index, topic, count)
                # a role call that breaks a habit of the standard (a repeated read, an id no result gave) is set
                # aside rather than have the contract quarantine every run's output for it
                for row in good:
                    problem = habit_problem(row)
                    (rejected if problem else kept).append({**row, "reason": problem} if problem else row)
                rejected += bad
                calls += call_rows
                runs.append(run_row(run, Rubric.model_validate_json(task["rubric"]), judge))
                bar.advance(progress)
    finally:
        engine.close()
        if judge is not None:
            judge.close()
    return {"trajectories": TRAJECTORY.frame(kept), "runs": RESEARCH_RUN.frame(runs),
            "calls": RESEARCH_CALL.frame(calls), REJECTED: TRAJECTORY_REJECTED.frame(rejected)}

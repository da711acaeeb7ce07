"""The rubric grader on reference-teacher reports as written and altered: with the derived facts removed (the
sentences that state a gap, a count or an ordering), analytical criteria should fall from Satisfied; with a
sentence that names a negative criterion's wrong entity beside the right one without claiming it, the negative
criterion should stay unmet, and with the wrong claim stated it should be met. Each figure beside the grader
without the derived facts and claimed relations of the criteria (words only: the grader before this one).

    .venv/bin/python -m bench.bench_rubrics [--entities 2000] [--tasks 24] [--runs 12] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import tempfile
import time
from pathlib import Path

from bench import report

DERIVED = re.compile(r"years (?:before|after)|\bin all\b|first:|more than")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    from data_contracts.stage import FrameArtifact
    from tasks.longctx.world import world
    from tasks.research.harness.knowledge import KnowledgeGraph
    from tasks.research.harness.reference import ReferenceTeacher
    from tasks.research.harness.rubric import Rubric, grade_lexical
    from tasks.research.harness.run import run_research
    from tasks.research.harness.text import sentences
    from tasks.research.research_tasks import research_tasks
    from tasks.research.search import SearchIndex, load_corpus

    frames = world.run({}, world.parse_params({"n_entities": args.entities, "n_questions": 0}), "bench")
    teacher = ReferenceTeacher(KnowledgeGraph.from_frames(frames["entities"], frames["relations"]))
    counts = {k: [0, 0] for k in ("analytical as written", "analytical, derived facts removed",
                                  "negative, names side by side", "negative, wrong claim stated")}
    with tempfile.TemporaryDirectory(prefix="bench-rubrics-") as tmp:
        index_dir = Path(tmp) / "index"
        SearchIndex.build(load_corpus(frames["documents"]), index_dir)
        inputs = {"world": FrameArtifact(frames), "search_index": FrameArtifact({}, directory=index_dir)}
        tasks = research_tasks.run(inputs, research_tasks.parse_params({"n": args.tasks}), "bench")["tasks"]
        words_only: dict[str, list[int]] = {k: [0, 0] for k in counts}
        for task in tasks.head(args.runs).iter_rows(named=True):
            run = run_research(task["query"], engine=teacher, index_dir=index_dir, teacher="reference",
                               task_id=task["task_id"], excluded=list(task["excluded_doc_ids"]))
            text = run.report or ""
            stripped = " ".join(s for s in sentences(text) if not DERIVED.search(s))
            for c in Rubric.model_validate_json(task["rubric"]).criteria:
                plain = c.model_copy(update={"derived": [], "relation": None})
                if c.category == "analytical":
                    cases = {"analytical as written": text, "analytical, derived facts removed": stripped}
                elif c.category == "negative" and c.relation:
                    subject, wrong = c.terms[0], c.terms[1]
                    cases = {"negative, names side by side": f"{text}\n\n{subject} is not linked to {wrong}; "
                                                             f"the sources name {wrong} elsewhere.",
                             "negative, wrong claim stated": f"{text}\n\n{_claim(c.relation, subject, wrong)}."}
                else:
                    continue
                for name, body in cases.items():
                    counts[name][0] += grade_lexical(body, c) == "satisfied"
                    counts[name][1] += 1
                    words_only[name][0] += grade_lexical(body, plain) == "satisfied"
                    words_only[name][1] += 1
    lines = ["", (f"## Rubric grading of the analysis (bench_rubrics.py, {time.strftime('%Y-%m-%d')}, "
                 f"{platform.machine()}, {os.cpu_count()} CPUs)"), "",
             (f"{args.entities} world entities, {min(args.runs, tasks.height)} reference-teacher reports on kept "
             "research tasks. Share of criteria graded Satisfied (lexical grader):"), "",
             "| report | criteria | this grader | words only (no derived fact, no claimed relation) |", "|---|---|---|---|"]
    for name, (hit, n) in counts.items():
        words = words_only[name]
        lines.append(f"| {name} | {n} | {hit / n if n else float('nan'):.3f} | "
                     f"{words[0] / words[1] if words[1] else float('nan'):.3f} |")
    report(lines, record=not args.no_record)


def _claim(relation: str, subject: str, obj: str) -> str:
    from tasks.research.harness.reference import _SAY

    return _SAY[relation][0].format(s=subject, o=obj) if relation in _SAY else f"{subject} {relation} {obj}"


if __name__ == "__main__":
    main()

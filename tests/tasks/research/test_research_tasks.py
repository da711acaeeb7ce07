"""Research tasks: the searchability gate on constructed cases of complete, partial and missing support (Keep,
Revise, Drop; a compound criterion revised to its supported part), the deterministic checks (duplicates, answer
leakage, excluded-source leakage, temporal scope), and the stage on a small world."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from research_fixtures import index_dir, small_world

from data_contracts.gate import validate
from data_contracts.stage import FrameArtifact
from envgen.rewards import normalize
from tasks.research.harness.rubric import Criterion, Evidence, Rubric
from tasks.research.research_tasks import (
    ResearchTaskParams,
    answer_leakage,
    doc_ids_by_title,
    duplicates,
    excluded_source_leakage,
    gate,
    research_tasks,
    task_problems,
    temporal_scope,
)
from tasks.research.search import SearchIndex, load_corpus

DOCS = [
    {"id": "article", "title": "Zorvex Labs", "text": "Zorvex Labs was founded by Mira Talven in 1931. It is "
     "headquartered in Quillport. It employs 412 people."},
    {"id": "founder", "title": "Mira Talven", "text": "Mira Talven is an engineer. Mira Talven founded Zorvex Labs."},
    {"id": "port", "title": "Quillport", "text": "Quillport is a harbour town. Its trade is salt."},
    {"id": "other", "title": "Brindlemoor", "text": "Brindlemoor was founded in 1931 by glassmakers."},
]


@pytest.fixture(scope="module")
def zorvex(tmp_path_factory: pytest.TempPathFactory) -> SearchIndex:
    root = tmp_path_factory.mktemp("zorvex")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return SearchIndex.build(load_corpus(root), root.parent / f"{root.name}-index")


def fact(cid: str, answers: list[str], title: str, weight: float = 3) -> Criterion:
    return Criterion(id=cid, title=title, weight=weight, category="factual", terms=["Zorvex Labs", *answers],
                     answer_terms=answers, together=len(answers) == 1,
                     evidence=[Evidence(doc_id="article", excerpt="...")] * len(answers))


def task(criteria: list[Criterion], query: str = "Write a report on Zorvex Labs.") -> dict:
    return {"topic_entity": "Zorvex Labs", "excluded_doc_ids": ["article"], "query": query,
            "rubric": Rubric(criteria=criteria), "profile": {"as_of": 2000}}


FOUNDER = fact("R1", ["Mira Talven"], "States that Zorvex Labs was founded by Mira Talven")
HEADQUARTERS = fact("R2", ["Quillport"], "States that Zorvex Labs is headquartered in Quillport")
STAFF = fact("R3", ["412"], "States that Zorvex Labs employs 412 people")
COMPOUND = fact("R4", ["Mira Talven", "Quillport"], "States that Zorvex Labs was founded by Mira Talven; and "
                                                   "Zorvex Labs is headquartered in Quillport", weight=4)


def test_complete_partial_and_missing_support_keep_revise_and_drop(zorvex: SearchIndex) -> None:
    rubric, verdicts, reason = gate(zorvex, task([FOUNDER, HEADQUARTERS, STAFF]), ResearchTaskParams(min_factual=1),
                                    ["article"])
    decisions = {v["id"]: (v["support"], v["decision"]) for v in verdicts}
    assert decisions == {"R1": ("complete", "Keep"), "R2": ("partial", "Revise"), "R3": ("missing", "Drop")}
    assert [c.id for c in rubric.criteria] == ["R1", "R2"]  # a dropped criterion is not retained
    assert reason is not None and "R2" in reason and "Revise" in reason  # a retained criterion is not at Keep
    assert all(e.doc_id != "article" for e in rubric.criteria[0].evidence)


def test_a_compound_criterion_is_revised_to_its_supported_part(zorvex: SearchIndex) -> None:
    rubric, verdicts, reason = gate(zorvex, task([COMPOUND]), ResearchTaskParams(min_factual=1), ["article"])
    assert reason is None
    [revised] = rubric.criteria
    assert revised.answer_terms == ["Mira Talven"] and "Quillport" not in revised.title
    assert verdicts[0]["support"] == "partial" and verdicts[0]["decision"] == "Keep" and "revised_to" in verdicts[0]
    assert [e.doc_id for e in revised.evidence] == ["founder"]


def test_too_few_searchable_criteria_fail_the_gate(zorvex: SearchIndex) -> None:
    _, _, reason = gate(zorvex, task([FOUNDER, STAFF]), ResearchTaskParams(min_factual=2), ["article"])
    assert reason is not None and "only 1 factual" in reason


def test_a_brief_gate_excludes_the_topics_own_article_so_a_brief_resting_on_it_fails(zorvex: SearchIndex) -> None:
    brief = {**task([FOUNDER, STAFF]), "excluded_doc_ids": []}
    _, verdicts, reason = gate(zorvex, brief, ResearchTaskParams(min_factual=2), [])
    assert reason is None  # with the topic's article searchable, the staff figure is found there
    _, verdicts, reason = gate(zorvex, brief, ResearchTaskParams(min_factual=2), ["article"])
    assert reason is not None and {v["id"]: v["decision"] for v in verdicts}["R3"] == "Drop"


def test_the_deterministic_checks(zorvex: SearchIndex) -> None:
    clean = task([FOUNDER])
    clean["rubric"] = Rubric(criteria=[FOUNDER.model_copy(update={"evidence": [Evidence(doc_id="founder",
                                                                                          excerpt="x")]})])
    assert task_problems(clean, zorvex) == []
    assert duplicates(Rubric(criteria=[FOUNDER, FOUNDER.model_copy(update={"id": "R9"})]))
    assert answer_leakage("Write a report on Zorvex Labs and its founder Mira Talven.", Rubric(criteria=[FOUNDER]))
    negative = FOUNDER.model_copy(update={"weight": -3, "category": "negative"})
    assert answer_leakage("Was Zorvex Labs founded by Mira Talven?", Rubric(criteria=[negative])) == []
    assert excluded_source_leakage("Report on Zorvex Labs.", Rubric(criteria=[FOUNDER]), ["article"], zorvex)
    copied = "Explain why Zorvex Labs was founded by Mira Talven in 1931 there."
    clean_rubric = clean["rubric"]
    assert any("copies" in p for p in excluded_source_leakage(copied, clean_rubric, ["article"], zorvex))
    dated = FOUNDER.model_copy(update={"years": [1931]})
    assert temporal_scope(Rubric(criteria=[dated]), 1930) and temporal_scope(Rubric(criteria=[dated]), 1931) == []


@pytest.fixture(scope="module")
def out() -> dict[str, pl.DataFrame]:
    world = FrameArtifact(small_world())
    return research_tasks.run({"world": world, "search_index": FrameArtifact({}, directory=Path(index_dir()))},
                              research_tasks.parse_params({"n": 16}), "p0")


def test_the_stage_keeps_tasks_that_pass_the_gate_and_the_checks(out) -> None:
    tasks, rejected = out["tasks"], out["rejected"]
    assert tasks.height >= 4 and tasks.height + rejected.height == 16
    assert set(tasks["construction"]) == {"brief", "article"}
    for name, frame in out.items():
        assert validate("research_tasks", name, frame, research_tasks.outputs[name], "p0").passed
    index = SearchIndex.open(index_dir())
    for row in tasks.iter_rows(named=True):
        rubric = Rubric.model_validate_json(row["rubric"])
        candidate = {**row, "rubric": rubric, "profile": json.loads(row["profile"])}
        assert task_problems(candidate, index) == []
        assert all(v["decision"] == "Keep" for v in json.loads(row["gate"]) if v["support"] != "missing")
        categories = {c.category for c in rubric.criteria}
        assert "factual" in categories and categories <= {"factual", "analytical", "implicit", "negative"}
        if row["construction"] == "brief":
            brief = json.loads(row["brief"])
            assert len(brief["doc_ids"]) >= 2 and brief["limitations"] and not row["excluded_doc_ids"]
            own = doc_ids_by_title(index)[normalize(row["topic_entity"])]
            assert all(own not in v["doc_ids"] for v in json.loads(row["gate"]))  # found elsewhere
        else:
            assert row["excluded_doc_ids"] == row["construction_doc_ids"]
        assert all(c.category != "analytical" or c.derived for c in rubric.criteria)  # names what it derives


def test_the_stage_is_deterministic(out) -> None:
    world = FrameArtifact(small_world())
    again = research_tasks.run({"world": world, "search_index": FrameArtifact({}, directory=Path(index_dir()))},
                               research_tasks.parse_params({"n": 16}), "p0")
    assert all(out[name].equals(again[name]) for name in out)


def test_the_brief_gate_can_fail() -> None:
    world = FrameArtifact(small_world())
    built = research_tasks.run({"world": world, "search_index": FrameArtifact({}, directory=Path(index_dir()))},
                               research_tasks.parse_params({"n": 16, "constructions": ["brief"]}), "p0")
    assert built["rejected"].filter(pl.col("reason").str.contains("factual criteria are searchable")).height

"""Stage `research_tasks`: research questions with rubrics, gated by searchability (LongCat-DeepResearch, 3.2).

A task starts from a target profile (language, topic, breadth, intended report, the ``as_of`` year bounding its
temporal scope) and one of two constructions over the world's documents:

- brief: a frozen multi-source brief — facts about the topic entity from several documents, each with its doc id
  and excerpt, and the brief's limitations — from which the question and the rubric are made;
- article: one construction document (the topic entity's article) from which the rubric is made, then excluded
  from search, so the task tests what other sources establish.

Rubrics are in ResearchRubrics form (tasks/research/harness/rubric.py): factual criteria with their supporting
evidence (some compound: two facts in one criterion), analytical criteria (a warranted relation between facts),
implicit requirements (the linked entities a full answer covers), negative conditions (a plausible wrong claim).
Construction evidence and rubric stay out of the query.

The searchability gate (bounded: ``gate_queries`` searches of ``gate_k`` hits per factual criterion, the
construction article removed from every hit list) reads the remaining documents and grades support for the whole
criterion: complete (a window of sentences of one document states the subject and every value) -> Keep, partial
(a value is found, not all or not with the subject) -> Revise, missing -> Drop. A compound criterion at Revise is
revised to its parts that have complete support and gated again; the task passes only when every retained
criterion is Keep and at least ``min_factual`` factual criteria remain. Deterministic checks then refuse duplicate
criteria, answer leakage (a value the report must supply appears in the query), excluded-source leakage (a
criterion's evidence is the excluded article, or the query copies it) and temporal scope (a fact dated after the
profile's ``as_of``). Refused tasks go to ``rejected`` with the reason.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import polars as pl
from pydantic import Field

from data_contracts.schemas import in_set
from data_contracts.stage import REJECTED, Artifact, Params, rng_for, stage
from envgen.rewards import normalize
from tasks.research.harness.evidence import Support, search_support
from tasks.research.harness.knowledge import Fact, KnowledgeGraph, facts, labels
from tasks.research.harness.rubric import Criterion, Evidence, Rubric
from tasks.research.harness.text import has_phrase, sentences, tokens
from tasks.research.records import RESEARCH_TASK, RESEARCH_TASK_REJECTED
from tasks.research.search import SearchIndex

STAGE = "research_tasks"
Construction = Literal["brief", "article"]
CONSTRUCTIONS: tuple[Construction, ...] = get_args(Construction)
DECISION = {"complete": "Keep", "partial": "Revise", "missing": "Drop"}
TOPIC_TYPES = ("organization", "person", "city")
BREADTH = {"narrow": 4, "medium": 6, "broad": 8}
SHINGLE = 8  # words a query may not share in a row with the excluded article
WEIGHTS = {"factual": 3.0, "compound": 4.0, "analytical": 4.0, "implicit": 2.0, "negative": -3.0}
QUERIES = {
    "organization": "Write a research report on the organisation {x}: its founding and founder, where it is "
                    "based, its size, the people who work there and what it has released or organised.",
    "person": "Write a research report on {x}: their background and birthplace, their career and employer, "
              "their family and what they founded or created.",
    "city": "Write a research report on the city {x}: its history and size, the country it lies in, and the "
            "people, organisations and events linked to it.",
}


class ResearchTaskParams(Params):
    n: int = Field(24, ge=0, description="tasks to construct in this partition (before the gate)")
    constructions: list[Construction] = Field(default_factory=lambda: list(CONSTRUCTIONS), min_length=1,
                                              description="how tasks are constructed, taken in turn by task index")
    min_factual: int = Field(3, ge=1, description="factual criteria a task must retain to pass the gate")
    compound_fraction: float = Field(0.3, ge=0.0, le=1.0, description="share of factual criteria that join two "
                                                                       "facts (revisable at the gate)")
    as_of: list[int] = Field(default_factory=lambda: [1990, 2024], min_length=1,
                             description="cut-off years a profile draws from (temporal scope)")
    gate_queries: int = Field(2, ge=1, le=5, description="searches per factual criterion at the gate (bounded)")
    gate_k: int = Field(5, ge=1, le=20, description="hits read per gate search")
    seed: int = Field(0, description="seeds every choice of every task")


# --- construction -----------------------------------------------------------------------------------------------


def _evidence(index: SearchIndex, doc_id: str, fact: Fact, subject: str) -> str | None:
    """The excerpt of ``doc_id`` stating ``fact``: its sentence holding the value, with the subject in reach."""
    if doc_id not in index:
        return None
    doc = index.document(doc_id)
    sents = sentences(doc.text)
    for i, sent in enumerate(sents):
        if has_phrase(tokens(sent), fact.answer):
            around = tokens(" ".join([doc.title, *sents[max(0, i - 2):i + 1]]))
            if has_phrase(around, subject):
                return sent
    return None


def _fact_criterion(cid: str, subject: str, group: Sequence[tuple[Fact, Evidence]]) -> Criterion:
    statement = "; and ".join(f.statement for f, _ in group)
    return Criterion(id=cid, title=f"States that {statement}",
                     weight=WEIGHTS["compound" if len(group) > 1 else "factual"], category="factual",
                     terms=[subject, *(f.answer for f, _ in group)], answer_terms=[f.answer for f, _ in group],
                     together=len(group) == 1, evidence=[e for _, e in group],
                     years=sorted({f.year for f, _ in group if f.year is not None}))


def build_task(kg: KnowledgeGraph, index: SearchIndex, doc_of: Mapping[str, str], node: str,
               construction: Construction, rng: random.Random, params: ResearchTaskParams,
               task_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """A task (before the gate) about ``node``, or None and why it cannot be made; ``doc_of`` maps a normalized
    title to its doc id."""
    x = kg.name(node)
    breadth = rng.choice(list(BREADTH))
    as_of = rng.choice(params.as_of)
    own = doc_of.get(normalize(x))
    if own is None:
        return None, f"{x} has no document in the index"
    stated: list[tuple[Fact, Evidence]] = []
    answers: set[str] = set()
    for fact in facts(kg, node):
        if fact.year is not None and fact.year > as_of or normalize(fact.answer) in answers:
            continue  # outside the profile's temporal scope, or a value already stated (a spouse, both ways)
        linked = doc_of.get(normalize(kg.name(fact.value))) if fact.kind in ("relation", "inverse") else None
        sources = [own] if construction == "article" else [d for d in (linked, own) if d]
        for doc_id in sources:
            excerpt = _evidence(index, doc_id, fact, x)
            if excerpt:
                stated.append((fact, Evidence(doc_id=doc_id, excerpt=excerpt)))
                answers.add(normalize(fact.answer))
                break
    rng.shuffle(stated)
    stated = stated[: BREADTH[breadth]]
    if len(stated) < params.min_factual:
        return None, f"{x}: only {len(stated)} facts are stated in its documents within the scope"
    criteria, i = [], 0
    while i < len(stated):
        size = 2 if i + 1 < len(stated) and rng.random() < params.compound_fraction else 1
        criteria.append(_fact_criterion(f"R{len(criteria) + 1}", x, stated[i:i + size]))
        i += size
    criteria += _other_criteria(kg, node, [f for f, _ in stated], rng, len(criteria))
    doc_ids = sorted({e.doc_id for _, e in stated}, key=_natural)
    if construction == "brief" and len(doc_ids) < 2:
        return None, f"{x}: the brief would rest on a single document"
    topic = f"{kg.type(node)}" + (f" ({kg.category(node)})" if kg.category(node) else "")
    profile = {"language": "en", "topic": topic, "breadth": breadth,
               "intended_report": "a sourced profile report of " + x, "as_of": as_of}
    brief = None
    if construction == "brief":
        brief = {"facts": [{"fact": f.statement, "doc_id": e.doc_id, "excerpt": e.excerpt} for f, e in stated],
                 "doc_ids": doc_ids,
                 "limitations": [f"Only what the collection's documents state, as of {as_of}.",
                                 f"{len(doc_ids)} documents; figures are as the documents give them, unverified."]}
    return {"task_id": task_id, "construction": construction, "query": QUERIES[kg.type(node)].format(x=x),
            "profile": profile, "topic_entity": x, "brief": brief, "construction_doc_ids": doc_ids if construction == "brief" else [own],
            "excluded_doc_ids": [own] if construction == "article" else [],
            "rubric": Rubric(criteria=criteria)}, None


def _other_criteria(kg: KnowledgeGraph, node: str, stated: list[Fact], rng: random.Random,
                    start: int) -> list[Criterion]:
    """An analytical criterion (two facts related), an implicit one (the linked entities covered) and a negative
    one (a plausible wrong relation), where the entity's facts allow them."""
    x, out = kg.name(node), []

    def cid() -> str:
        return f"R{start + len(out) + 1}"

    dated = [f for f in stated if f.year is not None]
    linked = [f for f in stated if f.kind == "relation"]
    for link in linked:
        other = [f for f in facts(kg, link.value) if f.year is not None]
        if dated and other:
            a, b = dated[0], other[0]
            out.append(Criterion(id=cid(), title=f"Relates {a.statement} to when {b.statement}, and what the gap "
                                 f"of {abs(a.year - b.year)} years means", weight=WEIGHTS["analytical"],
                                 category="analytical", terms=[x, a.answer, kg.name(link.value), b.answer],
                                 answer_terms=[a.answer, b.answer], together=False, years=sorted({a.year, b.year}),
                                 derived=[str(abs(a.year - b.year))]))
            break
    names = [f.answer for f in stated if f.kind in ("relation", "inverse")]
    if len(names) >= 2:
        out.append(Criterion(id=cid(), title=f"Covers each entity the sources link to {x}: {', '.join(names)}",
                             weight=WEIGHTS["implicit"], category="implicit", terms=names, answer_terms=names,
                             together=False))
    for link in linked:
        rivals = [n for n in kg.of_type(kg.type(link.value)) if n != link.value and n != node]
        if rivals:
            wrong = kg.name(rng.choice(rivals))
            out.append(Criterion(id=cid(), title=f"Claims that the {labels(link.key)[0]} of {x} is {wrong}",
                                 weight=WEIGHTS["negative"], category="negative", terms=[x, wrong],
                                 together=True, relation=link.key))
            break
    return out


# --- the searchability gate -------------------------------------------------------------------------------------


def gate(index: SearchIndex, task: dict[str, Any], params: ResearchTaskParams,
         excluded: Sequence[str]) -> tuple[Rubric, list[dict[str, Any]], str | None]:
    """The gated rubric, the verdict per factual criterion, and why the task fails (None when it passes).
    ``excluded``: what the gate's searches may not rely on (the construction article; for a brief, the topic's own
    article: a multi-source brief must be answerable from the other sources)."""
    subject = task["topic_entity"]
    verdicts, kept, failing = [], [], []

    def check(c: Criterion) -> tuple[Support, list[Evidence]]:
        queries = [" ".join([subject, *c.answer_terms]), c.title][: params.gate_queries]
        return search_support(index, subject, c.answer_terms, queries, excluded, params.gate_k)

    for c in task["rubric"].criteria:
        if c.category != "factual":
            kept.append(c)
            continue
        level, found = check(c)
        verdict = {"id": c.id, "support": level, "decision": DECISION[level], "doc_ids": [e.doc_id for e in found]}
        if level == "partial" and len(c.answer_terms) > 1:  # revise a compound criterion to its supported parts
            parts = [(p, ev) for p in _parts(c) for lvl, ev in [check(p)] if lvl == "complete"]
            if parts:
                c = _fact_criterion_from(c.id, subject, [p for p, _ in parts])
                level, found = "complete", [e for _, ev in parts for e in ev[:1]]
                verdict.update(revised_to=c.title, decision="Keep", doc_ids=[e.doc_id for e in found])
        verdicts.append(verdict)
        if level == "missing":
            continue  # dropped: not retained
        if level == "partial":
            failing.append(f"{c.id} ({c.title[:80]}): partial support, Revise")
        kept.append(c.model_copy(update={"evidence": found[:2]}))
    factual = sum(c.category == "factual" for c in kept)
    if failing:
        return Rubric(criteria=kept), verdicts, "criteria not at Keep: " + "; ".join(failing)
    if factual < params.min_factual:
        return Rubric(criteria=kept), verdicts, (f"only {factual} factual criteria are searchable without the "
                                                 f"construction article (at least {params.min_factual} needed)")
    return Rubric(criteria=kept), verdicts, None


def _parts(c: Criterion) -> list[Criterion]:
    """The atomic criteria a compound one joins."""
    statements = c.title.removeprefix("States that ").split("; and ")
    return [c.model_copy(update={"title": f"States that {statements[i]}", "answer_terms": [a],
                                 "terms": [c.terms[0], a], "evidence": c.evidence[i:i + 1], "together": True})
            for i, a in enumerate(c.answer_terms)]


def _fact_criterion_from(cid: str, subject: str, parts: Sequence[Criterion]) -> Criterion:
    statements = [p.title.removeprefix("States that ") for p in parts]
    return Criterion(id=cid, title="States that " + "; and ".join(statements),
                     weight=WEIGHTS["compound" if len(parts) > 1 else "factual"], category="factual",
                     terms=[subject, *(p.answer_terms[0] for p in parts)],
                     answer_terms=[p.answer_terms[0] for p in parts], together=len(parts) == 1,
                     evidence=[e for p in parts for e in p.evidence], years=sorted({y for p in parts for y in p.years}))


# --- deterministic checks ---------------------------------------------------------------------------------------


def duplicates(rubric: Rubric) -> list[str]:
    seen: dict[tuple[str, ...], str] = {}
    problems = []
    for c in rubric.criteria:
        key = (c.category, *sorted(normalize(t) for t in c.terms))
        if key in seen or normalize(c.title) in {normalize(x.title) for x in rubric.criteria if x.id != c.id}:
            problems.append(f"duplicate rubric: {c.id} repeats {seen.get(key) or 'another criterion'}")
        seen.setdefault(key, c.id)
    return problems


def answer_leakage(query: str, rubric: Rubric) -> list[str]:
    q = tokens(query)
    return [f"answer leakage: the query states {a!r}, which {c.id} asks the report to supply"
            for c in rubric.criteria if c.weight > 0 for a in c.answer_terms if has_phrase(q, a)]


def excluded_source_leakage(query: str, rubric: Rubric, excluded: Sequence[str], index: SearchIndex) -> list[str]:
    problems = [f"excluded-source leakage: {c.id} rests on the excluded document {e.doc_id}"
                for c in rubric.criteria for e in c.evidence if e.doc_id in excluded]
    q = normalize(query).split()
    shingles = {tuple(q[i:i + SHINGLE]) for i in range(len(q) - SHINGLE + 1)}
    for doc_id in excluded:
        if doc_id in index:
            words = normalize(index.document(doc_id).text).split()
            if any(tuple(words[i:i + SHINGLE]) in shingles for i in range(len(words) - SHINGLE + 1)):
                problems.append(f"excluded-source leakage: the query copies {SHINGLE} words of {doc_id}")
    return problems


def temporal_scope(rubric: Rubric, as_of: int) -> list[str]:
    return [f"temporal scope: {c.id} refers to {y}, after the profile's cut-off {as_of}"
            for c in rubric.criteria for y in c.years if y > as_of]


def task_problems(task: dict[str, Any], index: SearchIndex) -> list[str]:
    rubric = task["rubric"]
    return [*duplicates(rubric), *answer_leakage(task["query"], rubric),
            *excluded_source_leakage(task["query"], rubric, task["excluded_doc_ids"], index),
            *temporal_scope(rubric, task["profile"]["as_of"])]


# --- the stage --------------------------------------------------------------------------------------------------


def doc_ids_by_title(index: SearchIndex) -> dict[str, str]:
    return {normalize(index.document(d).title): d for d in index.doc_ids()}


def _natural(doc_id: str) -> tuple[int, str]:
    digits = "".join(ch for ch in doc_id if ch.isdigit())
    return (int(digits) if digits else -1, doc_id)


def _row(task: dict[str, Any], verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    return {**task, "profile": json.dumps(task["profile"]), "brief": json.dumps(task["brief"]) if task["brief"] else None,
            "rubric": task["rubric"].model_dump_json(), "n_criteria": len(task["rubric"].criteria),
            "gate": json.dumps(verdicts)}


# 2: analytical criteria name their derived fact, negative ones their relation; the brief gate excludes the topic's
# own article; 3: a task refused before the gate records no verdicts ("[]"), as the record's JSON list requires;
# 4: the ``route`` column and the ``routes`` param renamed ``construction`` and ``constructions``
@stage(name=STAGE, version="4", inputs=("world", "search_index"), params=ResearchTaskParams,
       outputs={"tasks": RESEARCH_TASK.contract(expectations=(in_set("construction", CONSTRUCTIONS),)),
                REJECTED: RESEARCH_TASK_REJECTED.contract()})
def research_tasks(inputs: Mapping[str, Artifact], params: ResearchTaskParams,
                   partition: str) -> dict[str, pl.DataFrame]:
    """Research questions with ResearchRubrics-form rubrics over the world documents, by brief and by article,
    kept only when every retained criterion is searchable and the deterministic checks pass."""
    world = inputs["world"]
    kg = KnowledgeGraph.from_frames(world.read("entities"), world.read("relations"))
    index = SearchIndex.open(inputs["search_index"].directory)
    doc_of = doc_ids_by_title(index)
    candidates = [n for t in TOPIC_TYPES for n in kg.of_type(t)]
    if not candidates:
        raise ValueError("research_tasks: the world has no organisation, person or city to research")
    kept, rejected = [], []
    for i in range(params.n):
        rng = rng_for(params.seed, STAGE, partition, i)
        construction = params.constructions[i % len(params.constructions)]
        task_id = f"research:{construction}:{partition}:{i}"
        task, reason = build_task(kg, index, doc_of, rng.choice(candidates), construction, rng, params,
                                  task_id)
        if task is None:
            rejected.append({"task_id": task_id, "construction": construction, "query": None, "reason": reason,
                             "gate": "[]"})
            continue
        own = doc_of.get(normalize(task["topic_entity"]))
        hidden = task["excluded_doc_ids"] if construction == "article" else [own] if own else []
        rubric, verdicts, reason = gate(index, task, params, hidden)
        task = {**task, "rubric": rubric}
        problems = [reason] if reason else task_problems(task, index)
        if problems:
            rejected.append({"task_id": task_id, "construction": construction, "query": task["query"],
                             "reason": "; ".join(problems), "gate": json.dumps(verdicts)})
        else:
            kept.append(_row(task, verdicts))
    return {"tasks": RESEARCH_TASK.frame(kept), REJECTED: RESEARCH_TASK_REJECTED.frame(rejected)}

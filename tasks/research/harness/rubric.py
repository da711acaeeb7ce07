"""Research rubrics in ResearchRubrics form and the grading of a report against them.

A criterion has a title, a signed weight and a category: ``factual`` (an atomic fact, with its supporting
evidence), ``analytical`` (a warranted comparison or inference), ``implicit`` (a requirement the task implies)
or ``negative`` (a condition the report must not meet; negative weight). Grading (LongCat-DeepResearch, section
4.1, ResearchRubrics' convention): each criterion is Satisfied / Partially / Not (1 / 0.5 / 0); the score is the
sum of verdict times weight over the sum of the positive weights, so a satisfied negative criterion is a penalty.

Verdicts come from a judge engine when one is given, else from the lexical fallback: a criterion's hidden check
terms (``terms``) found in the report — all of them within one window of consecutive sentences (or anywhere, when
``together`` is off) is Satisfied, at least half of them anywhere is Partially. An analytical criterion with
``derived`` facts (the gap of 236 years, a count, an ordering word) is Satisfied only when a window states them
all and the report states its base facts; the base facts without the derived one are Partially: restating the
inputs is not the analysis. A negative criterion with a ``relation`` is Satisfied only when a sentence claims
that relation, in that direction and not negated ("X was founded by W"; "X was founded by Y, not W" claims
nothing wrong); without one, when all its terms meet in one window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inference.engine import Engine, Request, SamplingParams
from tasks.research.harness.text import has_phrase, sentences, strip_citations, tokens
from tasks.research.search.claims import Gazetteer, Triple, extract

Category = Literal["factual", "analytical", "implicit", "negative"]
Verdict = Literal["satisfied", "partially", "not"]
SCORE: dict[str, float] = {"satisfied": 1.0, "partially": 0.5, "not": 0.0}
WINDOW = 3

JUDGE_SYSTEM = (
    "You grade a research report against one rubric criterion. Answer SATISFIED when the report fully meets "
    "the criterion, PARTIALLY when it meets part of it, NOT when it does not. A criterion that asks for an "
    "analysis (a gap, a count, an ordering) is SATISFIED only when the report states that derived fact, not "
    "merely the facts it derives from. For a criterion that describes a mistake, SATISFIED means the report "
    "asserts that mistake (mentioning the names together, or denying it, is not asserting it). Answer with that "
    "one word."
)


class Evidence(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_id: str = Field(description="the corpus document that states the fact")
    excerpt: str = Field(description="the passage that states it")


class Criterion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="R1, R2, ... unique within the rubric")
    title: str = Field(description="what the report must do (or, for a negative criterion, must not do)")
    weight: float = Field(description="importance; negative for a negative condition")
    category: Category = Field(description="factual | analytical | implicit | negative")
    terms: list[str] = Field(min_length=1, description="hidden check terms of the lexical fallback")
    answer_terms: list[str] = Field(default_factory=list,
                                    description="the facts the report must supply: never in the query (leakage)")
    together: bool = Field(True, description="the terms must meet in one window of sentences to satisfy")
    evidence: list[Evidence] = Field(default_factory=list, description="supporting evidence of a factual criterion")
    years: list[int] = Field(default_factory=list, description="years the criterion's facts refer to")
    derived: list[str] = Field(default_factory=list, description="an analytical criterion's derived facts (the "
                               "gap, the count, the ordering) the report must state, not only their inputs")
    relation: str | None = Field(None, description="a negative criterion's claimed relation: terms[0] relation "
                                 "terms[1] (a world relation name, e.g. founded_by)")


class Rubric(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    criteria: list[Criterion]


@dataclass(frozen=True)
class Grade:
    verdicts: dict[str, Verdict]
    score: float
    """Sum of verdict score times weight over the sum of positive weights (ResearchRubrics)."""
    by_category: dict[str, float]


@dataclass(frozen=True)
class _Read:
    """A report as the lexical grader reads it."""

    sentences: list[str]
    whole: tuple[str, ...]
    spans: list[tuple[str, ...]]


def _windows(report: str) -> _Read:
    sents = sentences(strip_citations(report))
    whole = tokens(" ".join(sents))
    spans = [tokens(" ".join(sents[i:i + WINDOW])) for i in range(max(1, len(sents) - WINDOW + 1))]
    return _Read(sents, whole, spans)


def grade_lexical(report: str, criterion: Criterion) -> Verdict:
    return _lexical(_windows(report), criterion)


def _lexical(read: _Read, criterion: Criterion) -> Verdict:
    whole, spans = read.whole, read.spans
    if criterion.category == "negative" and criterion.relation and len(criterion.terms) >= 2:
        return "satisfied" if _claims(read.sentences, criterion) else "not"
    together = any(all(has_phrase(span, t) for t in criterion.terms) for span in spans)
    if criterion.category == "negative":
        return "satisfied" if together else "not"
    found = sum(has_phrase(whole, t) for t in criterion.terms)
    if criterion.derived:
        stated = any(all(has_phrase(span, t) for t in criterion.derived) for span in spans)
        if stated and found == len(criterion.terms):
            return "satisfied"
        return "partially" if 2 * found >= len(criterion.terms) else "not"
    if together or (not criterion.together and found == len(criterion.terms)):
        return "satisfied"
    return "partially" if 2 * found >= len(criterion.terms) else "not"


def _claims(sents: list[str], criterion: Criterion) -> bool:
    """Some sentence asserts ``terms[0] relation terms[1]`` (direction kept, not negated)."""
    subject, obj = criterion.terms[0], criterion.terms[1]
    wanted = Triple(subject, criterion.relation or "", obj).key()
    gazetteer = Gazetteer.of([subject, obj])
    for sent in sents:
        if subject.lower() in sent.lower() and obj.lower() in sent.lower():
            claim = extract(sent, gazetteer, subject)
            if not claim.negated and any(t.key() == wanted for t in claim.triples):
                return True
    return False


def score(verdicts: dict[str, Verdict], criteria: Sequence[Criterion]) -> float:
    positive = sum(c.weight for c in criteria if c.weight > 0)
    return sum(SCORE[verdicts[c.id]] * c.weight for c in criteria) / positive if positive else 0.0


def grade(report: str, rubric: Rubric, judge: Engine | None = None) -> Grade:
    """Grade a report; with a judge engine every criterion is one request of one batch (an unreadable answer
    falls back to the lexical verdict)."""
    read = _windows(report)
    verdicts: dict[str, Verdict] = {c.id: _lexical(read, c) for c in rubric.criteria}
    if judge is not None and rubric.criteria:
        requests = [Request(messages=[{"role": "system", "content": JUDGE_SYSTEM},
                                      {"role": "user", "content": f"Criterion: {c.title}\n\nReport:\n{report}"}],
                            sampling=SamplingParams(temperature=0.0, max_tokens=8)) for c in rubric.criteria]
        for c, [completion] in zip(rubric.criteria, judge.generate(requests), strict=True):
            answer = completion.text.strip().upper()
            for word, verdict in (("PARTIAL", "partially"), ("NOT", "not"), ("SATISFIED", "satisfied")):
                if word in answer:
                    verdicts[c.id] = verdict  # type: ignore[assignment]
                    break
    by_category = {cat: score(verdicts, [c for c in rubric.criteria if c.category == cat])
                   for cat in dict.fromkeys(c.category for c in rubric.criteria)}
    return Grade(verdicts, score(verdicts, rubric.criteria), by_category)

"""Research rubrics in ResearchRubrics form and the grading of a report against them.

A criterion has a title, a signed weight and a category: ``factual`` (an atomic fact, with its supporting
evidence), ``analytical`` (a warranted comparison or inference), ``implicit`` (a requirement the task implies)
or ``negative`` (a condition the report must not meet; negative weight). Grading (LongCat-DeepResearch, section
4.1, ResearchRubrics' convention): each criterion is Satisfied / Partially / Not (1 / 0.5 / 0); the score is the
sum of verdict times weight over the sum of the positive weights, so a satisfied negative criterion is a penalty.

Verdicts come from a judge engine when one is given, else from the lexical fallback: a criterion's hidden check
terms (``terms``) found in the report — all of them within one window of consecutive sentences (or anywhere, when
``together`` is off) is Satisfied, at least half of them anywhere is Partially. A negative criterion is
Satisfied only when all its terms meet in one window (the wrong claim is made).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inference.engine import Engine, Request, SamplingParams
from inference.research.text import has_phrase, sentences, strip_citations, tokens

Category = Literal["factual", "analytical", "implicit", "negative"]
Verdict = Literal["satisfied", "partially", "not"]
SCORE: dict[str, float] = {"satisfied": 1.0, "partially": 0.5, "not": 0.0}
WINDOW = 3

JUDGE_SYSTEM = (
    "You grade a research report against one rubric criterion. Answer SATISFIED when the report fully meets "
    "the criterion, PARTIALLY when it meets part of it, NOT when it does not. For a criterion that describes a "
    "mistake, SATISFIED means the report makes that mistake. Answer with that one word."
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


class Rubric(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    criteria: list[Criterion]


@dataclass(frozen=True)
class Grade:
    verdicts: dict[str, Verdict]
    score: float
    """Sum of verdict score times weight over the sum of positive weights (ResearchRubrics)."""
    by_category: dict[str, float]


def _windows(report: str) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    sents = sentences(strip_citations(report))
    whole = tokens(" ".join(sents))
    spans = [tokens(" ".join(sents[i:i + WINDOW])) for i in range(max(1, len(sents) - WINDOW + 1))]
    return whole, spans


def grade_lexical(report: str, criterion: Criterion) -> Verdict:
    whole, spans = _windows(report)
    return _lexical(whole, spans, criterion)


def _lexical(whole: tuple[str, ...], spans: list[tuple[str, ...]], criterion: Criterion) -> Verdict:
    together = any(all(has_phrase(span, t) for t in criterion.terms) for span in spans)
    if criterion.category == "negative":
        return "satisfied" if together else "not"
    found = sum(has_phrase(whole, t) for t in criterion.terms)
    if together or (not criterion.together and found == len(criterion.terms)):
        return "satisfied"
    return "partially" if 2 * found >= len(criterion.terms) else "not"


def score(verdicts: dict[str, Verdict], criteria: Sequence[Criterion]) -> float:
    positive = sum(c.weight for c in criteria if c.weight > 0)
    return sum(SCORE[verdicts[c.id]] * c.weight for c in criteria) / positive if positive else 0.0


def grade(report: str, rubric: Rubric, judge: Engine | None = None) -> Grade:
    """Grade a report; with a judge engine every criterion is one request of one batch (an unreadable answer
    falls back to the lexical verdict)."""
    whole, spans = _windows(report)
    verdicts: dict[str, Verdict] = {c.id: _lexical(whole, spans, c) for c in rubric.criteria}
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

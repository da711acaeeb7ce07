"""Citation checking: every ``[cite:DOC_ID]`` of a text is checked against the corpus.

Citations that point to nothing or to the wrong source are the most reported defect of the open deep-research
harnesses (DESIGN.md section 7: gpt-researcher #1276, #1572; storm #168). A citation here is checked to exist (a
doc id of the index, not one of the task's excluded documents) and to support its sentence fact by fact
(tasks/research/search/support.py): the cited documents must state each relation of the sentence in its direction, each
number bound to the same attribute, every entity it names, and no negation they lack; a sentence without a
relation or number is judged by its predicate words. Against the world corpus the claim is also held against the
knowledge graph (``facts``). A judge engine, when given, decides support for the citations that pass the lexical
pre-filter (the document names every entity and states every number of the sentence); the others stay
unsupported without a call.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from inference.engine import Engine, Request, SamplingParams
from tasks.research.harness.text import cited_ids, sentences, strip_citations
from tasks.research.search.claims import Gazetteer
from tasks.research.search.index import SearchIndex
from tasks.research.search.support import Facts, SupportChecker

Verdict = Literal["supported", "unsupported", "missing", "excluded"]

JUDGE_SYSTEM = (
    "You check citations. Given a sentence and a passage of the source it cites, answer SUPPORTED only when the "
    "passage states what the sentence claims: each number for the same attribute (an employee count is not a "
    "budget), each relation between the same entities in the same direction (who founded whom, who works for "
    "whom), and no negation the passage lacks; a figure the sentence computes (a gap, a total) must follow from "
    "the passage's figures. Otherwise answer NOT_SUPPORTED. Answer with that one word."
)


@dataclass(frozen=True)
class CitationCheck:
    sentence: str
    doc_id: str
    verdict: Verdict
    overlap: float
    passage: str = ""
    section: str | None = None
    reason: str = ""

    @property
    def supported(self) -> bool:
        return self.verdict == "supported"


@dataclass(frozen=True)
class CitationReport:
    checks: tuple[CitationCheck, ...]
    uncited: int
    """Sentences that carry no citation (headings excluded)."""

    @property
    def total(self) -> int:
        return len(self.checks)

    @property
    def supported(self) -> int:
        return sum(c.supported for c in self.checks)

    @property
    def rate(self) -> float | None:
        """Citation support rate: supported citations over all citations (None without citations)."""
        return self.supported / self.total if self.total else None

    @property
    def dangling(self) -> list[CitationCheck]:
        """Citations to a document the corpus does not have, or one the task excludes."""
        return [c for c in self.checks if c.verdict in ("missing", "excluded")]

    def summary(self) -> dict[str, float | int | None]:
        return {"citations": self.total, "supported": self.supported, "rate": self.rate,
                "dangling": len(self.dangling), "uncited_sentences": self.uncited}


@lru_cache(maxsize=8)
def _gazetteer(directory: str, fingerprint: str, extra: tuple[str, ...]) -> Gazetteer:
    """The index's titles (and the facts' names) as entity names: built once per index."""
    from tasks.research.search.index import SearchIndex

    index = SearchIndex.open(directory)
    return Gazetteer.of([*index.titles(), *extra])


def checker(index: SearchIndex, facts: Facts | None = None, threshold: float = 0.6,
            window: int = 3) -> SupportChecker:
    extra = tuple(facts.names()) if facts is not None else ()
    gazetteer = _gazetteer(str(index.directory), index.info.corpus_fingerprint, extra)
    return SupportChecker(gazetteer, facts, threshold, window)


def check_citations(text: str, index: SearchIndex, *, excluded: Collection[str] = (), threshold: float = 0.6,
                    window: int = 3, judge: Engine | None = None, section: str | None = None,
                    facts: Facts | None = None) -> CitationReport:
    """Check every citation of ``text``; sentences are split as :func:`tasks.research.harness.text.sentences` does
    (a citation after a sentence's period belongs to that sentence). A sentence citing several documents is checked
    against them together; each must contribute. A citation with no sentence is never supported."""
    support = checker(index, facts, threshold, window)
    checks: list[CitationCheck] = []
    prefiltered: list[bool] = []
    uncited = 0
    for sent in sentences(text):
        ids = cited_ids(sent)
        if not ids:
            uncited += 1
            continue
        plain = strip_citations(sent)
        if not any(ch.isalnum() for ch in plain):  # a citation with no sentence before it supports nothing
            checks += [CitationCheck(plain, d, "unsupported", 0.0, section=section,
                                     reason="no sentence before the citation") for d in ids]
            prefiltered += [False] * len(ids)
            continue
        present = [d for d in ids if d not in excluded and d in index]
        docs = [index.document(d) for d in present]
        verdicts = dict(zip(present, support.check(plain, docs), strict=True)) if docs else {}
        lexical_ok = support.prefilter(plain, docs) is None if docs else False
        for doc_id in ids:
            if doc_id in excluded:
                checks.append(CitationCheck(plain, doc_id, "excluded", 0.0, section=section,
                                            reason="the task excludes this document"))
            elif doc_id not in index:
                checks.append(CitationCheck(plain, doc_id, "missing", 0.0, section=section,
                                            reason="the index has no such document"))
            else:
                v = verdicts[doc_id]
                checks.append(CitationCheck(plain, doc_id, v.verdict, v.overlap, v.passage, section, v.reason))
            prefiltered.append(doc_id in verdicts and lexical_ok)
    if judge is not None:
        checks = judge_support(judge, checks, prefiltered)
    return CitationReport(tuple(checks), uncited)


def judge_support(judge: Engine, checks: list[CitationCheck], passed: list[bool]) -> list[CitationCheck]:
    """The judge's verdict on every citation that passed the pre-filter (one batched call); the others are
    unsupported, and an unreadable answer keeps the fact-level verdict."""
    todo = [i for i, ok in enumerate(passed) if ok]
    requests = [Request(messages=[{"role": "system", "content": JUDGE_SYSTEM},
                                  {"role": "user", "content": f"Sentence: {checks[i].sentence}\n\n"
                                                              f"Passage ({checks[i].doc_id}): {checks[i].passage}"}],
                        sampling=SamplingParams(temperature=0.0, max_tokens=8)) for i in todo]
    out = [c if ok or c.verdict != "supported" else
           replace(c, verdict="unsupported", reason=f"pre-filter: {c.reason}") for c, ok in zip(checks, passed,
                                                                                                   strict=True)]
    for i, [completion] in zip(todo, judge.generate(requests) if requests else [], strict=True):
        answer = completion.text.strip().upper()
        if "NOT" in answer:
            out[i] = replace(checks[i], verdict="unsupported", reason="the judge: not supported")
        elif "SUPPORTED" in answer:
            out[i] = replace(checks[i], verdict="supported", reason="the judge: supported")
    return out

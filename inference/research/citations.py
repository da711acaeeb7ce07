"""Citation checking: every ``[cite:DOC_ID]`` of a text is checked against the corpus.

Citations that point to nothing or to the wrong source are the most reported defect of the open deep-research
harnesses (DESIGN.md section 7: gpt-researcher #1276, #1572; storm #168). A citation here is checked to exist (a
doc id of the index, not one of the task's excluded documents) and to support its sentence: lexically, the share
of the sentence's content terms found in the best window of ``window`` consecutive sentences of the cited document
(its title counts as part of every window) is at least ``threshold``, and every number and every name (capitalized
word) of the sentence is in that window: a claim about one person cited to another's document shares most of its
words ("X is employed by Scott, Hardin and Shaw") but not the name. A judge engine, when given, decides support for
the citations that exist, from that best window.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from envgen.search.index import SearchIndex
from inference.engine import Engine, Request, SamplingParams
from inference.research.text import cited_ids, names, numbers, sentences, strip_citations, terms

Verdict = Literal["supported", "unsupported", "missing", "excluded"]

JUDGE_SYSTEM = (
    "You check citations. Given a sentence and a passage of the source it cites, answer SUPPORTED when the "
    "passage states what the sentence claims, otherwise NOT_SUPPORTED. Answer with that one word."
)


@dataclass(frozen=True)
class CitationCheck:
    sentence: str
    doc_id: str
    verdict: Verdict
    overlap: float
    passage: str = ""
    section: str | None = None

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


@dataclass
class _Windows:
    """Sentence windows of the documents checked so far, with their term sets (each document analysed once)."""

    index: SearchIndex
    size: int
    cache: dict[str, list[tuple[str, set[str]]]] = field(default_factory=dict)

    def of(self, doc_id: str) -> list[tuple[str, set[str]]]:
        if doc_id not in self.cache:
            doc = self.index.document(doc_id)
            sents = sentences(doc.text) or [doc.text]
            spans = [" ".join(sents[i:i + self.size]) for i in range(max(1, len(sents) - self.size + 1))]
            title = terms([doc.title])[0]
            self.cache[doc_id] = [(s, t | title) for s, t in zip(spans, terms(spans), strict=True)]
        return self.cache[doc_id]


def lexical_support(claim_terms: set[str], required: set[str],
                    windows: Sequence[tuple[str, set[str]]]) -> tuple[float, str, bool]:
    """(overlap, best window, every required term present) of a claim against a document's windows."""
    if not claim_terms:
        return 0.0, "", False
    best = max(windows, key=lambda w: (len(claim_terms & w[1]), -len(w[0])))
    return len(claim_terms & best[1]) / len(claim_terms), best[0], required <= best[1]


def check_citations(text: str, index: SearchIndex, *, excluded: Collection[str] = (), threshold: float = 0.6,
                    window: int = 3, judge: Engine | None = None, section: str | None = None) -> CitationReport:
    """Check every citation of ``text``; sentences are split as :func:`inference.research.text.sentences` does."""
    windows = _Windows(index, window)
    checks: list[CitationCheck] = []
    uncited = 0
    sents = sentences(text)
    plains = [strip_citations(s) for s in sents]
    for sent, plain, claim, name_terms in zip(sents, plains, terms(plains), names(plains), strict=True):
        ids = cited_ids(sent)
        if not ids:
            uncited += 1
            continue
        required = numbers(claim) | name_terms
        for doc_id in ids:
            if doc_id in excluded:
                checks.append(CitationCheck(plain, doc_id, "excluded", 0.0, section=section))
            elif doc_id not in index:
                checks.append(CitationCheck(plain, doc_id, "missing", 0.0, section=section))
            else:
                overlap, passage, required_ok = lexical_support(claim, required, windows.of(doc_id))
                verdict: Verdict = "supported" if overlap >= threshold and required_ok else "unsupported"
                checks.append(CitationCheck(plain, doc_id, verdict, round(overlap, 4), passage, section))
    if judge is not None:
        checks = judge_support(judge, checks)
    return CitationReport(tuple(checks), uncited)


def judge_support(judge: Engine, checks: list[CitationCheck]) -> list[CitationCheck]:
    """The judge's verdict on every citation that exists (one batched call); an unreadable answer keeps the
    lexical verdict."""
    todo = [i for i, c in enumerate(checks) if c.verdict in ("supported", "unsupported")]
    requests = [Request(messages=[{"role": "system", "content": JUDGE_SYSTEM},
                                  {"role": "user", "content": f"Sentence: {checks[i].sentence}\n\n"
                                                              f"Passage ({checks[i].doc_id}): {checks[i].passage}"}],
                        sampling=SamplingParams(temperature=0.0, max_tokens=8)) for i in todo]
    out = list(checks)
    for i, [completion] in zip(todo, judge.generate(requests) if requests else [], strict=True):
        answer = completion.text.strip().upper()
        if "NOT" in answer:
            out[i] = _with(checks[i], "unsupported")
        elif "SUPPORTED" in answer:
            out[i] = _with(checks[i], "supported")
    return out


def _with(check: CitationCheck, verdict: Verdict) -> CitationCheck:
    return CitationCheck(check.sentence, check.doc_id, verdict, check.overlap, check.passage, check.section)

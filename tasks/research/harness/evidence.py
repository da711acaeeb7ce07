"""Bounded search for evidence: whether the corpus states a fact, outside the documents a task excludes.

The searchability gate of the research tasks (LongCat-DeepResearch, section 3.2) and the verification agent of
agent-based QA synthesis (LongCat-Flash-Thinking-2601, section 3.1.3) ask the same question: within a budget of
searches, does some document state the subject together with every value? Support is ``complete`` when a window
of three consecutive sentences of one document (its title counting as part of every window) holds the subject and
all values, ``partial`` when a value is found but not so, ``missing`` when no value is found in what was read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from tasks.research.harness.rubric import Evidence
from tasks.research.harness.text import has_phrase, sentences, tokens
from tasks.research.search import SearchIndex

Support = Literal["complete", "partial", "missing"]


def search_support(index: SearchIndex, subject: str, answers: Sequence[str], queries: Sequence[str],
            excluded: Sequence[str], k: int) -> tuple[Support, list[Evidence]]:
    """Bounded search for a factual requirement with the excluded documents removed: its support, and the
    windows stating it in full (complete support) or the documents read (otherwise, excerpts empty)."""
    read: dict[str, None] = {}
    for query in queries:
        for hit in index.search(query, k=k, exclude=excluded):
            read.setdefault(hit.doc_id)
    found_any, stating = False, []
    for doc_id in read:
        doc = index.document(doc_id)
        sents = sentences(doc.text) or [doc.text]
        spans = [" ".join(sents[i:i + 3]) for i in range(max(1, len(sents) - 2))]
        found_any |= any(has_phrase(tokens(doc.text), a) for a in answers)
        for span in spans:
            window = tokens(f"{doc.title} {span}")
            if has_phrase(window, subject) and all(has_phrase(window, a) for a in answers):
                stating.append(Evidence(doc_id=doc_id, excerpt=span))
                break
    if stating:
        return "complete", stating
    return ("partial" if found_any else "missing"), [Evidence(doc_id=d, excerpt="") for d in read]

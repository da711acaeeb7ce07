"""Text helpers the research harness, its checks and the reference teacher share: sentences, citation markers,
content terms (the search index's own analysis) and whole-token phrase matching."""

from __future__ import annotations

import re
from collections.abc import Sequence

from envgen.rewards import normalize
from tasks.research.search.index import analyze

CITATION = re.compile(r"\s*\[cite:\s*([^\]]+?)\s*\]")
# A sentence ends at . ! ? followed by space, except after a single capital (an initial: "Maria S. Huff").
_SENTENCE_END = re.compile(r"(?<![A-Z]\.)(?<=[.!?])\s+|\n+")
_HEADING = re.compile(r"^#{1,6}\s")
# A capitalized word: a word of a name ("Anna Navarro", "Scott, Hardin and Shaw") or a sentence's first, which a
# claim takes from its source too (and a stop word there, "The", "It", is no term).
_NAME_WORD = re.compile(r"\b[A-Z][\w'-]*")


_LEADING_CITATIONS = re.compile(r"(?:\s*\[cite:[^\]]*\])+")


def sentences(text: str) -> list[str]:
    """The sentences of a text (headings and blank lines dropped). Reports cite in two conventions, "... 66,327
    employees [cite:E361]." and "... 66,327 employees. [cite:E361]": a citation after the period belongs to the
    sentence before it, never to the next one or to a sentence of its own."""
    out: list[str] = []
    after_sentence = False  # the part before this one was a sentence (not a heading, not the start)
    for part in _SENTENCE_END.split(text):
        part = part.strip()
        if after_sentence and (lead := _LEADING_CITATIONS.match(part)):
            out[-1] = f"{out[-1]} {lead.group(0).strip()}"
            part = part[lead.end():].strip().lstrip(".!?").strip()  # "employees. [cite:E361]." keeps no "."
        if part and not _HEADING.match(part):
            out.append(part)
        after_sentence = bool(part) and not _HEADING.match(part) or after_sentence and not part
    return out


def cited_ids(sentence: str) -> list[str]:
    """Doc ids cited in a sentence, in order, without repeats."""
    return list(dict.fromkeys(CITATION.findall(sentence)))


def strip_citations(text: str) -> str:
    return CITATION.sub("", text)


def terms(texts: Sequence[str]) -> list[set[str]]:
    """Content terms of each text under the search index's analysis (lowercase words, English stop words out)."""
    return [set(t) for t in analyze(list(texts))] if texts else []


def names(texts: Sequence[str]) -> list[set[str]]:
    """The content terms of each text's capitalized words: the names it is about."""
    return terms([" ".join(_NAME_WORD.findall(text)) for text in texts])


def tokens(text: str) -> tuple[str, ...]:
    return tuple(normalize(text).split())


def has_phrase(hay: Sequence[str], phrase: str) -> bool:
    """``phrase`` occurs in the token sequence ``hay`` as a run of whole tokens (after normalization)."""
    needle = tokens(phrase)
    n = len(needle)
    if not n or n > len(hay):
        return False
    first = needle[0]
    return any(hay[i] == first and tuple(hay[i:i + n]) == needle for i in range(len(hay) - n + 1))

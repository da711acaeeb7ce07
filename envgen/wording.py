"""How text reads: sentence frames, the measure of how varied a writer's sentences are.

A sentence's frame keeps its function words in order and makes every run of other words, numbers and ids one slot,
so "My reservation number is R1." and "My email is a@b.c." share the frame "my <> is <>": a writer whose ten most
common frames cover most of its sentences teaches one template, whatever values fill it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

FUNCTION_WORDS = frozenset({
    "a", "an", "the", "this", "that", "these", "those", "my", "your", "our", "their", "his", "her", "its", "i",
    "you", "we", "they", "he", "she", "it", "me", "us", "them", "mine", "yours", "is", "are", "was", "were", "be",
    "been", "being", "am", "do", "does", "did", "done", "have", "has", "had", "will", "would", "can", "could",
    "shall", "should", "may", "might", "must", "to", "of", "in", "on", "at", "by", "for", "with", "from", "as",
    "into", "onto", "about", "over", "under", "after", "before", "than", "then", "so", "and", "or", "but", "if",
    "not", "no", "nor", "what", "which", "who", "whom", "whose", "where", "when", "why", "how", "all", "any", "each",
    "every", "both", "either", "neither", "some", "other", "another", "such", "there", "here", "now", "also", "just",
    "only", "still", "yet", "again", "once", "up", "down", "out", "off", "too", "very", "more", "most", "less",
    "much", "many", "few",
})
"""Words a sentence frame keeps: function words. Every other word, number and id is a slot, consecutive slots
merged, so "My reservation number is R1." and "My email is a@b.c." share the frame "my <> is <>"."""

TOP_FRAMES = 10
MAX_FRAME_SHARE = 0.30
MIN_FRAMED_SENTENCES = 150
"""Below this many sentences the ten most common frames of even a varied writer cover much of them by chance, so
the diversity check judges an output only from this size on."""

SENTENCE_END = re.compile(r"(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<=[.!?])\s+")
"""Where a sentence ends: after . ! ? and a space, not after a title ("Mr. Chad Smith")."""
_LIST_MARK = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+")
_WORD = re.compile(r"[\w@'-]+(?:\.[\w@-]+)*")  # a word, a number, an id, an email, a tool_name


def sentences(text: str) -> list[str]:
    """The sentences of ``text``: each line (a list item without its number or bullet) split at sentence ends."""
    return [s.strip() for line in (text or "").splitlines() for s in SENTENCE_END.split(_LIST_MARK.sub("", line))
            if s.strip()]


def sentence_frame(sentence: str) -> str:
    """The sentence's function words in order, every run of other words, numbers and ids one slot ``<>``."""
    out: list[str] = []
    for word in _WORD.findall(sentence.lower()):
        token = word if word in FUNCTION_WORDS else "<>"
        if not (token == "<>" and out and out[-1] == "<>"):
            out.append(token)
    return " ".join(out)


def frame_share(texts: Iterable[str], top: int = TOP_FRAMES) -> tuple[float, int, list[tuple[str, int]]]:
    """(share of sentences the ``top`` most common frames cover, sentences, those frames with their counts)."""
    counts = Counter(sentence_frame(s) for text in texts for s in sentences(text))
    total = sum(counts.values())
    common = counts.most_common(top)
    return (sum(n for _, n in common) / total if total else 0.0), total, common



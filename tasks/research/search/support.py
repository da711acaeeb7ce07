"""Whether cited documents state what a sentence claims, fact by fact, with the reason of the verdict.

A sentence is supported when its cited documents, together, state each relation it claims in the same direction
(``claims.Triple``), each number and date bound to the same attribute (a derived number, "a gap of 236 years",
must be a difference or sum of stated ones), name every entity it names, and negate what it negates; a sentence
that yields no relation and no number is judged by its predicate words (the content words that are not names),
stemmed, against the best window of consecutive sentences. Every cited document must contribute: a citation that
states none of the claim is unsupported even when a sibling citation carries the sentence. Where the entities'
facts are known (``Facts``: the synthetic world's knowledge graph), the claim is checked against them as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from tasks.research.search.claims import Claim, Gazetteer, Quantity, Triple, extract
from tasks.research.search.corpus import Document
from tasks.research.search.index import analyze

SupportVerdict = Literal["supported", "unsupported"]
_SENTENCE = re.compile(r"(?<![A-Z]\.)(?<=[.!?])\s+|\n+")


class Facts(Protocol):
    """Known facts of a corpus's entities (the world's knowledge graph)."""

    def names(self) -> Iterable[str]:
        """Every entity name (and alias) the facts know."""
        ...

    def contradiction(self, claim: Claim) -> str | None:
        """Why the facts refute ``claim`` (a relation, value or category they hold otherwise), None when they do
        not."""
        ...


@dataclass(frozen=True)
class Support:
    verdict: SupportVerdict
    reason: str
    passage: str
    overlap: float


@dataclass
class _Passage:
    """A document as the check reads it: its sentences' claims and term windows (analysed once)."""

    document: Document
    claims: list[Claim]
    windows: list[tuple[str, set[str], bool]]  # (text, stemmed terms with the title's, negated)
    lower: str

    def triples(self) -> set[tuple[str, str, str]]:
        return {t.key() for c in self.claims for t in c.triples}

    def quantities(self) -> list[Quantity]:
        return [q for c in self.claims for q in c.quantities if not q.derived]

    def best(self, predicate: set[str], names: set[str]) -> tuple[str, set[str], bool]:
        return max(self.windows, key=lambda w: (len(predicate & w[1]) + len(names & w[1]), -len(w[0])))


@dataclass
class SupportChecker:
    """Checks sentences against documents; ``gazetteer`` names the entities (the index's titles, the facts'
    names), ``window`` sentences make a passage."""

    gazetteer: Gazetteer
    facts: Facts | None = None
    threshold: float = 0.6
    window: int = 3
    _cache: dict[str, _Passage] = field(default_factory=dict)

    def passage(self, doc: Document) -> _Passage:
        if doc.doc_id not in self._cache:
            sents = [s.strip() for s in _SENTENCE.split(doc.text) if s.strip()] or [doc.text]
            claims = [extract(s, self.gazetteer, doc.title) for s in sents]
            spans = [sents[i:i + self.window] for i in range(max(1, len(sents) - self.window + 1))]
            title = stems(doc.title)
            windows = [(" ".join(span), stems(" ".join(span)) | title, any(c.negated for c in claims[i:i + len(span)]))
                       for i, span in enumerate(spans)]
            self._cache[doc.doc_id] = _Passage(doc, claims, windows, doc.text.lower())
        return self._cache[doc.doc_id]

    def prefilter(self, sentence: str, docs: Sequence[Document]) -> str | None:
        """The lexical pre-filter of a judge: why the documents cannot support the sentence (an entity it names
        or a number it states is absent from all of them), None when a judge should decide."""
        passages = [self.passage(d) for d in docs]
        claim = extract(sentence, self.gazetteer, docs[0].title if docs else None)
        for m in claim.mentions:
            if not any(_has_name(p, m.name) for p in passages):
                return f"the source does not name {m.name}"
        for q in claim.quantities:
            if not q.derived and not any(q.value == s.value or s.value.startswith(q.value + "-")
                                         for p in passages for s in p.quantities()):
                return f"the source does not state {_show(q)}"
        return None

    def check(self, sentence: str, docs: Sequence[Document]) -> list[Support]:
        """One verdict per cited document, in order."""
        passages = [self.passage(d) for d in docs]
        claim = extract(sentence, self.gazetteer, docs[0].title if docs else None)
        names = {m.name for m in claim.mentions}
        name_terms = stems(" ".join(names))
        predicate = stems(sentence) - name_terms - {t for t in stems(sentence) if t.isdigit()}
        bests = [p.best(predicate, name_terms) for p in passages]
        union = set().union(*(b[1] for b in bests)) if bests else set()
        overlap = len(predicate & union) / len(predicate) if predicate else 1.0
        passage_text = " … ".join(b[0] for b in bests)
        reason, contributes = self._whole(claim, passages, names, predicate, union, overlap, bests)
        out = []
        for p, best, helps in zip(passages, bests, contributes, strict=True):
            if reason is not None:
                out.append(Support("unsupported", reason, best[0], round(overlap, 4)))
            elif not helps:
                out.append(Support("unsupported", f"{p.document.doc_id} states none of the sentence's facts "
                                                  "(another citation carries it)", best[0], round(overlap, 4)))
            else:
                out.append(Support("supported", _support_reason(claim), best[0], round(overlap, 4)))
        return out if out else [Support("unsupported", "no document cited", passage_text, 0.0)]

    def _whole(self, claim: Claim, passages: list[_Passage], names: set[str], predicate: set[str],
               union: set[str], overlap: float,
               bests: list[tuple[str, set[str], bool]]) -> tuple[str | None, list[bool]]:
        """(why the cited documents together do not support the claim or None, which documents contribute)."""
        helps = [False] * len(passages)
        for name in names:
            holders = [i for i, p in enumerate(passages) if _has_name(p, name)]
            if not holders:
                return f"the source does not name {name}", helps
            for i in holders:
                helps[i] = helps[i] or len(names) == 1 or name != claim.subject
        for t in claim.triples:
            holders = [i for i, p in enumerate(passages) if t.key() in p.triples()]
            if not holders:
                return _triple_reason(t, passages), helps
            for i in holders:
                helps[i] = True
        stated = [q for q in claim.quantities if not q.derived]
        for q in stated:
            holders = [i for i, p in enumerate(passages) if any(q.matches(s) for s in p.quantities())]
            if not holders:
                return _quantity_reason(q, passages), helps
            for i in holders:
                helps[i] = True
        sources = stated + [s for p in passages for s in p.quantities()]
        for q in claim.quantities:
            if q.derived and not _derivable(q, sources) and not _counted(q, claim):
                return f"{_show(q)} is neither stated by the source nor computed from what it states", helps
        if claim.negated and not any(b[2] for b in bests):
            return "the sentence negates what the source states", helps
        if not claim.negated and bests and all(b[2] for b in bests) and claim.structured:
            return "the source states it negated", helps
        if claim.structured:  # its facts hold; what else it says must be the source's words or a paraphrase's
            extra = sorted(predicate - union - PARAPHRASE)
            if len(extra) * 3 > len(predicate):
                return f"the source does not say {', '.join(extra)}", helps
        elif predicate and overlap < self.threshold:
            return (f"the passage has {overlap:.0%} of the sentence's predicate words, below "
                    f"{self.threshold:.0%}: it does not say this"), helps
        if self.facts is not None and (refuted := self.facts.contradiction(claim)) is not None:
            return refuted, helps
        if not claim.structured:  # judged by words: every document whose window holds some predicate word helps
            helps = [h or bool(predicate & b[1]) or not predicate for h, b in zip(helps, bests, strict=True)]
        return None, helps


def _has_name(passage: _Passage, name: str) -> bool:
    lowered = name.lower()
    return lowered == passage.document.title.lower() or lowered in passage.lower


def _triple_reason(t: Triple, passages: list[_Passage]) -> str:
    known = [tuple(k) for p in passages for k in p.triples()]
    s, o = t.subject.lower(), t.object.lower()
    if (o, t.relation, s) in known:
        return f"the source states the reverse: {t.object} {t.relation.replace('_', ' ')} {t.subject}"
    other = [k for k in known if {k[0], k[2]} == {s, o}]
    if other:
        return f"the source relates them otherwise ({other[0][1].replace('_', ' ')}), not as {t}"
    return f"the source does not state that {t}"


def _quantity_reason(q: Quantity, passages: list[_Passage]) -> str:
    elsewhere = [s for p in passages for s in p.quantities() if s.value == q.value and s.attribute != q.attribute]
    if elsewhere:
        return f"the source gives {_show(q)} as {elsewhere[0].attribute}, not {q.attribute}"
    about = [s for p in passages for s in p.quantities() if q.attribute and s.attribute == q.attribute]
    if about:
        return f"the source gives {q.attribute} as {_show(about[0])}, not {_show(q)}"
    return f"the source does not state {_show(q)}"


def _derivable(q: Quantity, sources: Sequence[Quantity]) -> bool:
    values = {_number(s) for s in sources} - {None}
    target = _number(q)
    return target is not None and any(abs(a - b) == target or a + b == target for a in values for b in values)


def _counted(q: Quantity, claim: Claim) -> bool:
    """A count the sentence itself lists: "A, B and C work for X, 3 in all"."""
    groups: dict[tuple[str, str], int] = {}
    for t in claim.triples:
        for side in ((t.relation, t.object.lower()), (t.relation, "<" + t.subject.lower())):
            groups[side] = groups.get(side, 0) + 1
    return _number(q) in {float(n) for n in groups.values()}


def _number(q: Quantity) -> float | None:
    text = q.value[:4] if "-" in q.value else q.value  # a date's year
    try:
        return float(text)
    except ValueError:
        return None


def _show(q: Quantity) -> str:
    return q.value if "-" in q.value or len(q.value) <= 4 else f"{int(float(q.value)):,}"


def _support_reason(claim: Claim) -> str:
    parts = [str(t) for t in claim.triples] + [f"{q.attribute or 'value'} {_show(q)}" for q in claim.quantities]
    return "states " + "; ".join(parts) if parts else "states the sentence's words"


def stems(text: str) -> set[str]:
    """Content terms under the index's analysis, crudely stemmed so a paraphrase's "worked" meets "works"."""
    return {_stem(t) for t in analyze([text])[0]} if text.strip() else set()


def _stem(term: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(term) > len(suffix) + 3 and term.endswith(suffix):
            return term[: -len(suffix)]
    return term


# Words a paraphrase of a relation or a figure uses where the source has others ("established" for "founded",
# "workforce" for "employees"); a structured claim may carry them.
_PARAPHRASE_WORDS = (
    "has have had is was are were been being "
    "established set started founder creator author director employer employee employs staff workforce headcount "
    "worked working joined member native birthplace hometown based headquarters seat spouse wife husband partner "
    "wrote directed recorded made produced published issued released came out hosted staged took place "
    "organised organized organiser organizer annual yearly year years spends spending spend budget costs "
    "people inhabitants residents population counts numbers home some about around roughly nearly also "
    "currently today company organisation organization firm city town event person work total combined gap "
    "apart difference earlier later before after more fewer larger smaller older younger first last "
    "all in each both created creates held located lies born founded works work employed headquartered "
    "organised organized released married lowest highest comes release birth founding earliest smallest "
    "came name names named sources source staging")
PARAPHRASE = frozenset(_stem(w) for w in _PARAPHRASE_WORDS.split())

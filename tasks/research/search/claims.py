"""What a sentence claims, read the way a citation check needs it: the entities it names, its numbers and dates
bound to the attribute they measure, the relations it puts entities in (subject, relation, object: direction
kept), and whether it negates.

Entities are found by a gazetteer (the index's document titles, a knowledge graph's names: longest name first,
whole words), else as runs of capitalized words; "It", "Its", "The company", ... stand for the context entity (the
document's title for a passage). Relations are read from the words between two adjacent mentions ("founded in 1721
by" makes the left one the organisation and the right one its founder; "founded" alone the reverse) and carried
along a list ("Its employees include A, B and C"). A number's attribute is the cue nearest before it in its clause
("employs 3,908,139 people": employees; "$79,116": budget), else the one just after ("79,116 employees").
The relation and attribute vocabulary is the one encyclopedic text uses for people, organisations, places, works
and events (the world's relations, envgen's own corpus); a sentence outside it yields no relation, and the check
falls back to its words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
_DATE = re.compile(r"\b(" + "|".join(m.capitalize() for m in MONTHS) + r")\s+(\d{1,2}),\s+(\d{4})\b")
_NUMBER = re.compile(r"(\$\s?)?\b\d{1,3}(?:,\d{3})+\b|(\$\s?)?\b\d+(?:\.\d+)?\b")
_WORD = re.compile(r"\w+")
_CLAUSE_END = re.compile(r"(?<!\b[A-Z])[.;](?=\s)")  # not an initial's full stop ("Sheena C. Hull")
NEGATION = re.compile(r"\b(?:not|never|no|none|neither|nor|cannot|without|no longer)\b|n't\b", re.IGNORECASE)
# Words that stand for the entity a passage is about ("It was founded by ...", "The company has ...").
_PRONOUN = re.compile(r"\b(?:[Ii]ts?|[Tt]he (?:company|city|settlement|event|country|organisation|organization|"
                      r"firm|work|film|novel|album|festival|conference|marathon|exhibition|summit|tournament))\b")
_CAPITALIZED = re.compile(r"\b[A-Z][\w'-]*(?:\s+(?:[A-Z]\.|[A-Z][\w'-]*))*")
# Capitalized words that open sentences without naming anything.
_OPENERS = frozenset({"The", "A", "An", "It", "Its", "In", "On", "As", "At", "By", "Of", "Notable", "Organisations",
                      "Organizations", "Works", "Attendance", "He", "She", "They", "His", "Her", "Their", "This",
                      "That", "These", "Both", "Each", "Neither", "Not", "No", "While", "Whereas", "Since",
                      "After", "Before", "Which", "Who", "When", "Where", "However", "Also", "With", "For", "From",
                      "Unlike", "Like", "Although", "During", "Between", "Among", "Under", "Over", "Today",
                      "Later", "Then", "There", "Here", "Together", "Only", "All", "Some", "Most", "Founded", "Born",
                      "Released", "Held", "Located", "Headquartered"})

# Attribute cues, searched nearest-first around a number.
ATTRIBUTE_CUES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((a, re.compile(p, re.IGNORECASE)) for a, p in (
    ("budget", r"\bbudget\b|\bspend\w*|\bcosts?\b|\brevenue\b"),
    ("employees", r"\bemploy\w*|\bstaff\b|\bworkers\b|\bworkforce\b|\bheadcount\b"),
    ("population", r"\bpopulation\b|\binhabitants\b|\bresidents\b|\bhome to\b|\bcensus\b"),
    ("attendance", r"\battend\w*|\bvisitors\b|\bcrowds?\b|\bspectators\b"),
    ("founded", r"\bfound(?:ed|ing)\b|\bestablished\b|\bdates from\b|\bformed\b|\bset up\b"),
    ("born", r"\bborn\b|\bbirth\b"),
    ("released", r"\breleased?\b|\bpublished\b|\bcame out\b|\bissued\b"),
    ("held", r"\bheld\b|\btook place\b|\bhosted\b|\bstaged\b"),
))
# A number with one of these words next to it is computed from others (a gap, a difference, a total).
DERIVED_CUE = re.compile(r"\b(?:gap|difference|apart|years? (?:before|after|later|earlier)|more than|fewer than|"
                         r"less than|larger than|smaller than|combined|total|together|between them|separate|in all)\b",
                         re.IGNORECASE)

# (pattern over the words between two adjacent mentions, relation, whether the left mention is the subject).
# Order matters: a passive cue ("founded ... by") is tried before its active verb ("founded").
_RELATION_CUES: tuple[tuple[re.Pattern[str], str, bool], ...] = tuple((re.compile(f"(?:{p})" + r"\s*(?:the\s+)?$", re.IGNORECASE), r, left)
                                                                         for p, r, left in (
    (r"\b(?:found(?:ed|er)|established|set up|started)\b.*\bby", "founded_by", True),
    (r"(?:'s|whose) founder (?:is|was)", "founded_by", True),
    (r"\b(?:is|was) (?:the |a )?(?:co-?)?founder of|\b(?:co-?)?found(?:ed|s)|\bestablished|\bset up", "founded_by",
     False),
    ((r"\b(?:works?|worked|working) (?:for|at)|\bemployed (?:by|at)|\b(?:an )?employee of|'s employer (?:is|was)|"
     r"\bjoined"), "works_for", True),
    (r"\bemploys|\bemployed|\b(?:employees|staff) include", "works_for", False),
    (r"\bmarried to|\bmarried|'s (?:spouse|wife|husband) (?:is|was)|\b(?:spouse|wife|husband) of", "married_to",
     True),
    (r"\bborn in|\bborn (?:on )?\w+ \d{1,2}, \d{4},? in|\bnative of|\bhails from|\bcomes from", "born_in", True),
    (r"\bheadquartered in|\bheadquarters (?:are|is|were|was) in|\bbased in|\bhas its headquarters in",
     "headquartered_in", True),
    (r"\b(?:written|directed|recorded|created|composed|authored|made) by", "created_by", True),
    (r"\b(?:wrote|directed|recorded|created|composed|authored)|\bis the (?:author|director|creator) of",
     "created_by", False),
    (r"\b(?:released|published|issued)\b.*\bby", "published_by", True),
    (r"\b(?:has |have )?(?:released|published|issued)(?: it)?", "published_by", False),
    (r"\borgani[sz]ed by", "organized_by", True),
    (r"\borgani[sz]e[sd]", "organized_by", False),
    (r"\b(?:held|staged|took place) in", "held_in", True),
    (r"\b(?:has )?hosted", "held_in", False),
    (r"\b(?:located|lies|situated) in|\b(?:is|was) a (?:city|town|municipality)(?: located)? in", "located_in",
     True),
    (r"\bcities include", "located_in", False),
))
# "<phrase> <L> include <R>": "Notable people born in X include A and B" makes A and B the subjects.
_INCLUDE_CUES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(f"(?:{p})" + r"\s*(?:the\s+)?$", re.IGNORECASE), r) for p, r in (
    (r"\bborn in", "born_in"), (r"\bheadquartered in", "headquartered_in"), (r"\bworks (?:by|of)", "created_by"),
    (r"\bfounded by", "founded_by"), (r"\b(?:employees|staff) of", "works_for"), (r"\bheld in", "held_in"),
    (r"\borgani[sz]ed by", "organized_by"), (r"\breleased by", "published_by"), (r"\bcities (?:of|in)", "located_in"),
))
_INCLUDE = re.compile(r"^\s*(?:,\s*)?include[sd]?\s*(?:the\s+)?$", re.IGNORECASE)
_LIST = re.compile(r"^\s*(?:,|;|and|or|, and|; and)\s*(?:the\s+)?$", re.IGNORECASE)
SYMMETRIC = frozenset({"married_to"})


@dataclass(frozen=True)
class Mention:
    start: int
    end: int
    name: str


@dataclass(frozen=True)
class Quantity:
    value: str
    """digits of a number ("3908139"), or a date as "YYYY-MM-DD"."""
    attribute: str | None
    derived: bool = False
    """The number is computed from others (a gap, a total), not stated by a source."""

    def matches(self, other: Quantity) -> bool:
        """``other`` (a source's) states this value for a compatible attribute; a year matches a full date."""
        same = self.value == other.value or (len(self.value) == 4 and other.value.startswith(self.value + "-"))
        return same and (self.attribute is None or other.attribute is None or self.attribute == other.attribute)


@dataclass(frozen=True)
class Triple:
    subject: str
    relation: str
    object: str

    def key(self) -> tuple[str, str, str]:
        if self.relation in SYMMETRIC:
            a, b = sorted((self.subject.lower(), self.object.lower()))
            return (a, self.relation, b)
        return (self.subject.lower(), self.relation, self.object.lower())

    def __str__(self) -> str:
        return f"{self.subject} {self.relation.replace('_', ' ')} {self.object}"


@dataclass(frozen=True)
class Claim:
    text: str
    mentions: tuple[Mention, ...]
    quantities: tuple[Quantity, ...]
    triples: tuple[Triple, ...]
    negated: bool

    @property
    def subject(self) -> str | None:
        """The entity the sentence is about: its first mention."""
        return self.mentions[0].name if self.mentions else None

    @property
    def structured(self) -> bool:
        return bool(self.triples or self.quantities)


@dataclass
class Gazetteer:
    """Known entity names, matched as whole words, longest first, case-insensitively."""

    _first: dict[str, list[tuple[tuple[str, ...], str]]] = field(default_factory=dict)

    @classmethod
    def of(cls, names: Iterable[str]) -> Gazetteer:
        g = cls()
        for name in dict.fromkeys(n for n in names if n and n.strip()):
            words = tuple(w.lower() for w in _WORD.findall(name))
            if words:
                g._first.setdefault(words[0], []).append((words, name))
        for options in g._first.values():
            options.sort(key=lambda o: -len(o[0]))
        return g

    def find(self, text: str) -> list[Mention]:
        words = list(_WORD.finditer(text))
        lower = [w.group().lower() for w in words]
        out, i = [], 0
        while i < len(words):
            for name_words, name in self._first.get(lower[i], ()):
                n = len(name_words)
                if tuple(lower[i:i + n]) == name_words and words[i].group()[0].isupper():
                    out.append(Mention(words[i].start(), words[i + n - 1].end(), name))
                    i += n - 1
                    break
            i += 1
        return out


EMPTY = Gazetteer()


def mentions(text: str, gazetteer: Gazetteer = EMPTY, context: str | None = None) -> list[Mention]:
    """Entity mentions in text order: the gazetteer's names, pronouns standing for ``context``, and other runs of
    capitalized words (sentence openers dropped)."""
    found = gazetteer.find(text)
    taken = [(m.start, m.end) for m in found]

    def free(a: int, b: int) -> bool:
        return all(b <= s or a >= e for s, e in taken)

    if context:
        for m in _PRONOUN.finditer(text):
            if free(m.start(), m.end()):
                found.append(Mention(m.start(), m.end(), context))
                taken.append((m.start(), m.end()))
    for m in _CAPITALIZED.finditer(text):
        parts = list(re.finditer(r"\S+", m.group()))
        while parts and (parts[0].group() in _OPENERS or parts[0].group().lower() in MONTHS):
            parts.pop(0)
        while parts and parts[-1].group().lower() in MONTHS:
            parts.pop()
        if parts:
            start, end = m.start() + parts[0].start(), m.start() + parts[-1].end()
            if free(start, end):
                found.append(Mention(start, end, _short_form(text[start:end], context)))
    return sorted(found, key=lambda m: m.start)


def _short_form(name: str, context: str | None) -> str:
    """A passage's "Amy was born in ..." speaks of its title "Amy H. Roy": a run of the title's own words stands
    for the title."""
    if context and name != context and set(name.split()) <= set(context.split()):
        return context
    return name


def quantities(text: str) -> list[Quantity]:
    """Dates and numbers of ``text`` with the attribute each measures (None when no cue is near)."""
    spans: list[tuple[int, int, str]] = []
    for m in _DATE.finditer(text):
        spans.append((m.start(), m.end(), (f"{int(m.group(3)):04d}-{MONTHS.index(m.group(1).lower()) + 1:02d}-"
                                          f"{int(m.group(2)):02d}")))
    for m in _NUMBER.finditer(text):
        if all(m.end() <= s or m.start() >= e for s, e, _ in spans):
            spans.append((m.start(), m.end(), m.group()))
    spans.sort()
    out, boundary = [], 0
    for start, end, raw in spans:
        ends = [m.end() for m in _CLAUSE_END.finditer(text, 0, start)]
        clause_start = max(boundary, ends[-1] if ends else 0)
        before, after = text[clause_start:start], text[end:end + 30]
        if raw.startswith("$"):
            attribute: str | None = "budget"
        else:
            attribute = _nearest_cue(before, last=True) or _nearest_cue(after.split(";")[0], last=False)
        value = raw if "-" in raw else re.sub(r"[^\d.]", "", raw)
        # The cue next to this number, not to a neighbour: "founded in 1940, 63 years apart" derives only 63.
        near = text[max(boundary, start - 25):start] + " " + re.split(r"\d", text[end:end + 25])[0]
        out.append(Quantity(value, attribute, bool(DERIVED_CUE.search(near))))
        boundary = end
    return out


def _nearest_cue(text: str, last: bool) -> str | None:
    best: tuple[int, str] | None = None
    for attribute, cue in ATTRIBUTE_CUES:
        for m in cue.finditer(text):
            pos = m.end() if last else -m.start()
            if best is None or pos > best[0]:
                best = (pos, attribute)
    return best[1] if best else None


def triples(text: str, found: Sequence[Mention]) -> list[Triple]:
    """The relations ``text`` states between adjacent mentions, carried along lists on either side ("A, B and C
    work for X"; "X employs A, B and C")."""
    out: list[Triple] = []
    last: tuple[str, str, bool] | None = None  # (relation, the fixed entity, whether it is the subject)
    chain: list[Mention] = []  # the mentions listed before the current left one ("A, B and" of "A, B and C work")
    for left, right in pairwise(found):
        between = text[left.end:right.start]
        pre = text[max(0, left.start - 40):left.start]
        if between.strip() == "," and re.search(r"native of\s*$", pre, re.IGNORECASE):  # "A native of X, Y grew up"
            out.append(Triple(right.name, "born_in", left.name))
            last, chain = None, []
            continue
        listed = bool(_LIST.match(between))
        if last is not None and listed:
            relation, fixed, fixed_is_subject = last
            out.append(Triple(fixed, relation, right.name) if fixed_is_subject else
                       Triple(right.name, relation, fixed))
            continue
        last = None
        if listed:
            chain.append(left)
            continue
        members, chain = [*chain, left], []
        if _INCLUDE.match(between):
            for cue, relation in _INCLUDE_CUES:
                if cue.search(pre):
                    out.append(Triple(right.name, relation, left.name))
                    last = (relation, left.name, False)
                    break
            if last is not None:
                continue
        for cue, relation, left_is_subject in _RELATION_CUES:
            if cue.search(between):
                for m in members:
                    out.append(Triple(m.name, relation, right.name) if left_is_subject else
                               Triple(right.name, relation, m.name))
                last = (relation, left.name, True) if left_is_subject else (relation, left.name, False)
                break
    return [t for t in out if t.subject.lower() != t.object.lower()]


def extract(text: str, gazetteer: Gazetteer = EMPTY, context: str | None = None) -> Claim:
    """The claim of one sentence (or of each sentence of a passage, joined: relations stay within a sentence)."""
    found = mentions(text, gazetteer, context)
    return Claim(text, tuple(found), tuple(quantities(text)), tuple(triples(text, found)),
                 bool(NEGATION.search(text)))

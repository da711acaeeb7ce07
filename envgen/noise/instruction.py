"""Instruction noise: recorded transforms of a task's text and user profile.

LongCat-Flash-Thinking-2601, section 3.3.3 "Noise Modeling": instruction noise captures "ambiguity and variability
in user interaction patterns" — ambiguous queries, underspecified requests, inconsistent terminology and implicit
assumptions "that the agent must discover through clarification". Each transform here returns the
:class:`~envgen.noise.records.Transform` saying what changed and how it is recovered, and never removes
information for good (the solvability constraint): a removed detail stays in the user profile (ask the user) or
in an earlier tool output (look it up), and a synonym maps back through :data:`LEXICON`.

A *detail* is a golden argument value stated verbatim in the task text; transforms act on details and on the
words around them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envgen.noise.records import DECLARED, Transform, declare
from envgen.wording import FUNCTION_WORDS, SENTENCE_END

LEXICON: dict[str, tuple[str, ...]] = {
    # canonical term -> synonyms a user may use instead. Shared with the robust reference agent, standing in for
    # the world knowledge a model brings; every synonym maps back to exactly one canonical term.
    "reservation": ("booking",),
    "order": ("purchase",),
    "customer": ("client",),
    "account": ("profile",),
    "cancel": ("call off",),
    "cancelled": ("called off",),
    "confirmed": ("booked",),
    "email": ("e-mail",),
    "phone": ("telephone",),
    "address": ("mailing address",),
    "refund": ("reimbursement",),
    "refunded": ("reimbursed",),
    "economy": ("coach",),
    "shipped": ("dispatched",),
    "delivered": ("handed over",),
    "pending": ("awaiting processing",),
    "active": ("live",),
    "suspended": ("on hold",),
    "closed": ("shut",),
    "update": ("modify",),
    "change": ("amend",),
    "upgrade": ("bump up",),
    "payment": ("charge",),
    "subscription": ("plan",),
    "appointment": ("visit",),
    "ticket": ("case",),
    "flight": ("air trip",),
    "product": ("item",),
    "quantity": ("number of units",),
    "scheduled": ("planned",),
    "completed": ("finished",),
    "paid": ("settled",),
    "unpaid": ("outstanding",),
    "available": ("in stock",),
    # enum values of the shipped domains, so terminology noise reaches the values tools need
    "business": ("first-rate",),
    "standard": ("regular meal",),
    "vegetarian": ("meat-free",),
    "vegan": ("plant-based",),
    "regular": ("ordinary",),
    "gold": ("top tier",),
    "silver": ("mid tier",),
    "damaged": ("broken",),
    "late": ("delayed delivery",),
    "lost": ("missing",),
    "resolved": ("fixed",),
    "overdue": ("past due",),
    "disputed": ("contested",),
    "returned": ("sent back",),
    "exchanged": ("swapped",),
    "approved": ("accepted",),
    "rejected": ("declined",),
    "delayed": ("running late",),
    "roaming": ("abroad usage",),
    "billing": ("invoicing",),
    "premier": ("top plan",),
    "enterprise": ("corporate",),
    "electronics": ("gadgets",),
    "apparel": ("clothing",),
}
SYNONYM_TO_CANONICAL: dict[str, str] = {syn: canon for canon, syns in LEXICON.items() for syn in syns}

# Paraphrase rewrites: (pattern, replacements); they change the surface, never a value.
_PARAPHRASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\bI want to\b", ("I'd like to", "I need to")),
    (r"\bI would like to\b", ("I want to", "I'd like to")),
    (r"\bI need to\b", ("I have to", "I must")),
    (r"\bPlease\b", ("Kindly", "Could you please")),
    (r"\bplease\b", ("kindly",)),
    (r"\bCan you\b", ("Could you", "Would you")),
    (r"\bas well\b", ("too",)),
    (r"\bthen\b", ("after that",)),
)
_OPENERS = ("Hi there.", "Hello!", "Good day.")
_CLOSERS = (" Thanks a lot.", " Thank you!", " Appreciate the help.")
GREETING = re.compile(r"^(hi|hello|hey|good (morning|afternoon|day|evening))\b", re.IGNORECASE)
_THANKS = re.compile(r"^(thanks|thank you|appreciate|cheers)\b", re.IGNORECASE)
_DETERMINERS = frozenset({"a", "an", "the", "this", "that", "these", "those", "my", "your", "our", "their", "his",
                          "her", "its"})
_PREPOSITIONS = frozenset({"to", "for", "at", "on", "with", "from", "by", "into", "onto", "under", "of"})
_VAGUE = frozenset({"one", "account", "file", "usual"})  # the words of a vague phrase that name nothing
_STATEMENT = re.compile(r"^(?:My|The) (?P<label>[^.!?]+?) (?:I mean )?is (?P<value>.+?)[.!]?$")


@dataclass(frozen=True)
class Detail:
    """A golden argument value stated verbatim in the task text."""

    step: int
    tool: str
    arg: str
    value: Any
    surface: str
    profile_path: str | None
    lookup: tuple[int, str] | None  # (earlier golden step, path in its clean output) holding the value

    @property
    def words(self) -> str:
        """How a user names the argument: 'reservation_id' -> 'reservation'."""
        return re.sub(r"_(id|ids|key)$", "", self.arg).replace("_", " ")


@dataclass
class Draft:
    """A task being made noisy: its text and profile (mutated by transforms) and the details still intact."""

    description: str
    user_profile: dict[str, Any]
    details: list[Detail]
    consumed: set[str] = field(default_factory=set)  # surfaces already rewritten by an earlier transform

    def free_details(self) -> list[Detail]:
        return [d for d in self.details if d.surface not in self.consumed and mentions(self.description, d.surface)]


def _word_re(text: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(text)}(?![\w-])", re.IGNORECASE)


def mentions(text: str, surface: str) -> bool:
    """``surface`` occurs in ``text`` on token boundaries (so '19' is not found inside '1984')."""
    return bool(surface) and _word_re(surface).search(text) is not None


def surfaces(value: Any) -> list[str]:
    """The ways a value is written in text: 12.5 -> ['12.5', '12.50']."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, float):
        return list(dict.fromkeys([repr(value), f"{value:.2f}", f"{value:g}"]))
    return [str(value)] if str(value).strip() else []


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every scalar of a JSON value with its path ('0.email', 'items.2.price')."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}.{i}" if path else str(i))
    else:
        yield path, value


def find_path(value: Any, target: Any) -> str | None:
    return next((p for p, v in leaves(value) if v == target and not isinstance(v, bool)), None)


def find_details(
    description: str,
    user_profile: Mapping[str, Any],
    golden: Sequence[Mapping[str, Any]],
    outputs: Sequence[Any],
) -> list[Detail]:
    """The details of a task: golden argument values stated in ``description``, one per surface.

    ``outputs[i]`` is the clean output of golden step ``i`` (from a replay), used to find where an earlier tool
    output holds the same value.
    """
    details: dict[str, Detail] = {}
    for step, action in enumerate(golden):
        for arg, value in sorted(action.get("arguments", {}).items()):
            for surface in surfaces(value):
                if surface in details or not mentions(description, surface):
                    continue
                lookup = next(
                    ((j, p) for j in range(step) if (p := find_path(outputs[j], value)) is not None), None
                )
                details[surface] = Detail(
                    step, action["name"], arg, value, surface, find_path(user_profile, value), lookup
                )
                break
    return sorted(details.values(), key=lambda d: (d.step, d.arg))


def _tidy(text: str) -> str:
    text = re.sub(r"\s+([.,;:!?])", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def _sentences(text: str) -> list[str]:
    return [x for x in SENTENCE_END.split(text) if x]


def greetings(text: str) -> int:
    """How many sentences in a row open the text with a greeting ("Hello! Hi there." opens with two)."""
    count = 0
    for sentence in _sentences(text):
        if not GREETING.match(sentence):
            break
        count += 1
    return count


@dataclass(frozen=True)
class Place:
    """Where a detail sits in the text, and the span a rewrite replaces: ``statement`` is the value of a sentence
    stating it alone ("My email is x."; the span is the value, ``sentence`` the whole sentence), ``noun`` the value
    after the words naming it ("dish D12": the span covers both, ``noun`` is those words), ``phrase`` the value in a
    noun-phrase position after a verb or preposition ("change the meal to kosher")."""

    kind: str
    start: int
    end: int
    noun: str
    sentence: tuple[int, int] = (0, 0)


def _words_before(text: str, end: int, n: int) -> list[str]:
    return re.findall(r"[\w'-]+", text[:end])[-n:] if n else []


def _nouns(words: str) -> list[list[str]]:
    """The words naming a detail, and without a trailing name/number/code ("dish name" is also "dish")."""
    names = words.split()
    bare = names[:-1] if len(names) > 1 and names[-1] in ("name", "number", "code", "id") else None
    return [names, bare] if bare else [names]


def place(text: str, detail: Detail) -> Place | None:
    """The one place ``detail`` is stated and what kind of slot it fills; None when it is stated more than once
    or inside a noun phrase ("a basic_economy seat"), where no rewrite of it alone stays grammatical."""
    found = list(_word_re(detail.surface).finditer(text))
    if len(found) != 1:
        return None
    start, end = found[0].span()
    offset = 0
    for sentence in _sentences(text):
        at = text.index(sentence, offset)
        offset = at + len(sentence)
        if at <= start < offset:
            stated = _STATEMENT.match(sentence)
            if stated and stated["value"] == detail.surface:
                return Place("statement", start, end, stated["label"], (at, offset))
            break
    after = re.match(r"\s*([\w'-]+)", text[end:])
    if after and after.group(1).lower() not in FUNCTION_WORDS:
        return None  # the value modifies what follows ("a basic_economy seat")
    for names in _nouns(detail.words):
        for n in range(len(names), 0, -1):
            if [w.lower() for w in _words_before(text, start, n)] == names[-n:]:
                head = re.search(rf"(?:\b(?:{'|'.join(_DETERMINERS)})\s+)?[\w'-]+(?:\s+[\w'-]+){{{n - 1}}}\s*$",
                                 text[:start], re.IGNORECASE)
                return Place("noun", head.start(), end, " ".join(names[-n:]))
    before = _words_before(text, start, 1)
    if not before or before[0].lower() in _DETERMINERS:
        return None
    return Place("phrase", start, end, detail.words)


def insertion_problem(text: str, phrase: str, nouns: set[str] = frozenset()) -> str | None:
    """What is ungrammatical around an inserted ``phrase``: a determiner before it ("a the cabin on my account"),
    the noun it names just before it ("add dish the dish on my account"), a word of the noun phrase it interrupts
    after it ("... on my account seat"), or a sentence saying the thing is itself ("My invoice is the invoice on
    my account"). ``nouns`` are more words naming the detail (its argument's words)."""
    own = {w for w in re.findall(r"[a-z']+", phrase.lower()) if w not in FUNCTION_WORDS} | nouns
    for m in re.finditer(re.escape(phrase), text):
        before = _words_before(text, m.start(), 1)
        word = before[0].lower() if before else ""
        if word in _DETERMINERS:
            return f"a determiner before the inserted phrase: {word!r} {phrase!r}"
        if word in own:
            return f"the noun repeats around the inserted phrase: {word!r} {phrase!r}"
        after = re.match(r"\s*([A-Za-z][\w'-]*)", text[m.end():])
        if after and after.group(1).lower() not in FUNCTION_WORDS:
            return f"the inserted phrase runs into {after.group(1)!r}"
        sentence = next((x for x in _sentences(text) if phrase in x), "")
        stated = _STATEMENT.match(sentence)
        named = {w for w in re.findall(r"[a-z']+", phrase.lower()) if w not in FUNCTION_WORDS} - _VAGUE
        if stated and set(re.findall(r"[a-z']+", stated["label"].lower())) & named:
            return f"the sentence says the {stated['label']} is itself: {sentence!r}"
    return None


def wording_problem(description: str, transforms: Sequence[Mapping[str, Any]]) -> str | None:
    """What a careful reader objects to in a noisy task's text: two greetings, a text that lost its request (only
    greetings and thanks left), or an ungrammatical insertion of one of its ``transforms`` (records, as stored)."""
    if all(GREETING.match(x) or _THANKS.match(x) for x in _sentences(description)):
        return f"the request is gone: {description!r}"
    if greetings(description) > 1:
        return f"two greetings: {' '.join(_sentences(description)[:2])!r}"
    return next(iter(insertion_problems(description, transforms)), None)


def insertion_problems(description: str, transforms: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ungrammatical insertions of ``transforms`` (records, as stored) in a noisy task's text, one per
    transform that inserted a vague phrase."""
    out = []
    for t in transforms:
        phrase = (t.get("changed") or {}).get("replaced_with")
        if phrase:
            nouns = set(re.sub(r"_(id|ids|key)$", "", str(t["changed"].get("argument", ""))).split("_")) - {""}
            if (problem := insertion_problem(description, phrase, nouns)) is not None:
                out.append(f"{t['kind']}: {problem}")
    return out


def _rewrite(draft: Draft, where: Place, replacement: str) -> None:
    text = draft.description
    draft.description = _tidy(text[:where.start] + replacement + text[where.end:])


def _vague(where: Place, statement: str, other: str) -> str:
    """The vague words for a place: ``statement`` fills a statement's value, ``other`` (with ``{noun}``) a noun
    or phrase place."""
    return statement if where.kind == "statement" else other.format(noun=where.noun)


def _preposition_before(draft: Draft, where: Place) -> bool:
    before = _words_before(draft.description, where.start, 1)
    return bool(before) and before[0].lower() in _PREPOSITIONS


def _match_case(source: str, word: str) -> str:
    return word[:1].upper() + word[1:] if source[:1].isupper() else word


TransformFn = Callable[[Draft, random.Random, int], Transform | str]
"""(draft, rng, intensity) -> the applied Transform, or a reason it does not apply to this task."""

INSTRUCTION_TRANSFORMS: Mapping[str, TransformFn] = DECLARED["instruction"]
"""Every instruction transform by kind, in curriculum order (mildest first): a level unlocks a prefix."""


def instruction_transform(fn: TransformFn) -> TransformFn:
    """Declare ``fn`` as the instruction transform named after it (a duplicate raises); declaration order is
    curriculum order."""
    declare("instruction", fn.__name__, fn)
    return fn


@instruction_transform
def paraphrase(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    before = draft.description
    text = before
    candidates = [(p, reps) for p, reps in _PARAPHRASES if re.search(p, text)]
    for pattern, reps in rng.sample(candidates, min(len(candidates), 1 + intensity)):
        text = re.sub(pattern, rng.choice(reps), text, count=1)
    # One greeting: a text that opens with one has it replaced, not doubled.
    rest = _sentences(text)[greetings(text):]
    opener = rng.choice([o for o in _OPENERS if not text.startswith(o)])
    draft.description = _tidy(" ".join([opener, *rest]) + rng.choice(_CLOSERS))
    return Transform(
        family="instruction", kind="paraphrase", changed={"before": before, "after": draft.description},
        recovery="none", hint="Only the wording changed; every stated value is still in the text.", bites=False,
    )


@instruction_transform
def terminology(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    values = {str(d.value).lower() for d in draft.details}
    found = [term for term in LEXICON if mentions(draft.description, term)]
    found = [t for t in found if not any(t.lower() in c.lower() for c in draft.consumed)]
    if not found:
        return "no term of the lexicon occurs in the task text"
    # Value terms first: a synonym for a value the tools need is the inconsistency that matters.
    found.sort(key=lambda t: (t not in values, t))
    chosen = found[: 1 + intensity]
    mapping = {}
    for term in chosen:
        synonym = rng.choice(LEXICON[term])
        draft.description = _word_re(term).sub(lambda m, s=synonym: _match_case(m.group(0), s), draft.description)
        mapping[term] = synonym
        draft.consumed.add(term)
    value_terms = sorted(t for t in chosen if t in values)
    return Transform(
        family="instruction", kind="terminology",
        changed={"synonyms": mapping, "value_terms": value_terms},
        recovery="map_synonym" if value_terms else "none",
        hint="Map each synonym back to the canonical term the tools use: "
        + ", ".join(f"'{s}' means '{t}'" for t, s in mapping.items()),
        bites=bool(value_terms),
    )


def _remove_detail(draft: Draft, rng: random.Random, pick: Callable[[Detail, Place], bool]
                   ) -> tuple[Detail, Place] | None:
    """A free detail that ``pick`` accepts in the slot it fills (a detail with no rewritable place is never
    picked), marked consumed."""
    pool = [(d, where) for d in draft.free_details() if (where := place(draft.description, d)) is not None
            and pick(d, where)]
    if not pool:
        return None
    detail, where = rng.choice(pool)
    draft.consumed.add(detail.surface)
    return detail, where


@instruction_transform
def ambiguity(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    picked = _remove_detail(draft, rng, lambda d, _: d.profile_path is not None)
    if picked is None:
        return "no stated detail held in the user profile sits where a vague phrase can replace it"
    detail, where = picked
    vague = _vague(where, "the one on my account", "the {noun} on my account")
    before = draft.description
    _rewrite(draft, where, vague)
    return Transform(
        family="instruction", kind="ambiguity",
        changed={"removed": detail.surface, "replaced_with": vague, "argument": detail.arg,
                 "profile_path": detail.profile_path, "before": before, "after": draft.description},
        recovery="ask_user",
        hint=f"Ask the user which {detail.words} they mean; their profile holds it ({detail.profile_path}).",
    )


@instruction_transform
def implicit_assumption(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    """The user takes a detail for granted ("my usual ..."). Recovered by looking it up when an earlier golden
    call returns it, else by asking the user to confirm it (it is in their profile)."""
    picked = _remove_detail(draft, rng, lambda d, _: d.lookup is not None)
    picked = picked or _remove_detail(draft, rng, lambda d, _: d.profile_path is not None)
    if picked is None:
        return ("no stated detail returned by an earlier golden call or held in the user profile sits where an "
                "assumed phrase can replace it")
    detail, where = picked
    implied = (_vague(where, "the usual one", "my usual {noun}") if detail.lookup is None
               else _vague(where, "the one you have on file", "the {noun} you have on file"))
    before = draft.description
    _rewrite(draft, where, implied)
    changed = {"removed": detail.surface, "replaced_with": implied, "argument": detail.arg,
               "before": before, "after": draft.description}
    if detail.lookup is not None:
        step, path = detail.lookup
        return Transform(
            family="instruction", kind="implicit_assumption",
            changed={**changed, "lookup_step": step, "lookup_path": path}, recovery="look_up",
            hint=f"The user assumes the system knows the {detail.words}: read it from the output of golden step "
            f"{step} ({path}).",
        )
    return Transform(
        family="instruction", kind="implicit_assumption",
        changed={**changed, "profile_path": detail.profile_path}, recovery="ask_user",
        hint=f"The user assumes you know their usual {detail.words}; ask them to state it ({detail.profile_path}).",
    )


@instruction_transform
def underspecification(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    picked = _remove_detail(draft, rng, lambda d, where: where.kind != "phrase" or _preposition_before(draft, where))
    if picked is None:
        return "no stated detail can be left out with the sentence still whole"
    detail, where = picked
    before = draft.description
    if where.kind == "statement":  # the sentence stated the detail alone: it goes
        _rewrite(draft, Place(where.kind, *where.sentence, where.noun), "")
    elif where.kind == "noun":  # "to flight FL1" -> "to a flight"
        _rewrite(draft, where, f"{'an' if where.noun[:1] in 'aeiou' else 'a'} {where.noun}")
    else:  # "set my limit to 1615.29." -> "set my limit."
        head = re.search(r"[\w'-]+\s*$", before[:where.start])
        _rewrite(draft, Place(where.kind, head.start(), where.end, where.noun), "")
    path = detail.profile_path
    if path is None:
        # Keep the omitted detail where the user simulator answers from it (the solvability constraint); the
        # profile is the task's ``user_profile``: {"persona", "facts": [{"name", "label", "value"}]}.
        facts = draft.user_profile.setdefault("facts", [])
        facts.append({"name": detail.arg, "label": detail.arg.replace("_", " "), "value": detail.value})
        path = f"facts.{len(facts) - 1}.value"
    return Transform(
        family="instruction", kind="underspecification",
        changed={"removed": detail.surface, "argument": detail.arg, "profile_path": path,
                 "added_to_profile": detail.profile_path is None, "before": before, "after": draft.description},
        recovery="ask_user",
        hint=f"The request omits the {detail.words}; ask the user for it ({path} of their profile).",
    )

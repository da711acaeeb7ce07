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

from envgen.noise.records import Transform

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
    (r"\bmy\b", ("my own",)),
    (r"\bas well\b", ("too",)),
    (r"\bthen\b", ("after that",)),
)
_OPENERS = ("Hi there. ", "Hello! ", "Good day. ")
_CLOSERS = (" Thanks a lot.", " Thank you!", " Appreciate the help.")


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


def _replace(text: str, surface: str, replacement: str) -> str:
    return _word_re(surface).sub(lambda _: replacement, text)


def _tidy(text: str) -> str:
    text = re.sub(r"\s+([.,;:!?])", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def _drop_sentence(text: str, surface: str, others: Sequence[str]) -> str:
    """``text`` without the detail: its sentence when that is a short statement of it alone ("My email is x."),
    else just the value (a sentence that also states ``others`` stays)."""
    sentences = re.split(r"(?<=[.!?])\s+", text)
    kept = [s for s in sentences if not (mentions(s, surface) and len(s.split()) <= 12
                                         and not any(mentions(s, o) for o in others))]
    return _tidy(" ".join(kept) if len(kept) < len(sentences) else _replace(text, surface, ""))


def _match_case(source: str, word: str) -> str:
    return word[:1].upper() + word[1:] if source[:1].isupper() else word


TransformFn = Callable[[Draft, random.Random, int], Transform | str]
"""(draft, rng, intensity) -> the applied Transform, or a reason it does not apply to this task."""


def paraphrase(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    before = draft.description
    text = before
    candidates = [(p, reps) for p, reps in _PARAPHRASES if re.search(p, text)]
    for pattern, reps in rng.sample(candidates, min(len(candidates), 1 + intensity)):
        text = re.sub(pattern, rng.choice(reps), text, count=1)
    text = rng.choice(_OPENERS) + text + rng.choice(_CLOSERS)
    draft.description = _tidy(text)
    return Transform(
        family="instruction", kind="paraphrase", changed={"before": before, "after": draft.description},
        recovery="none", hint="Only the wording changed; every stated value is still in the text.", bites=False,
    )


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


def _remove_detail(draft: Draft, rng: random.Random, pick: Callable[[Detail], bool]) -> Detail | None:
    pool = [d for d in draft.free_details() if pick(d)]
    if not pool:
        return None
    detail = rng.choice(pool)
    draft.consumed.add(detail.surface)
    return detail


def ambiguity(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    detail = _remove_detail(draft, rng, lambda d: d.profile_path is not None)
    if detail is None:
        return "no stated detail is also held in the user profile"
    vague = f"the {detail.words} on my account"
    before = draft.description
    draft.description = _tidy(_replace(before, detail.surface, vague))
    return Transform(
        family="instruction", kind="ambiguity",
        changed={"removed": detail.surface, "replaced_with": vague, "argument": detail.arg,
                 "profile_path": detail.profile_path, "before": before, "after": draft.description},
        recovery="ask_user",
        hint=f"Ask the user which {detail.words} they mean; their profile holds it ({detail.profile_path}).",
    )


def underspecification(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    detail = _remove_detail(draft, rng, lambda d: True)
    if detail is None:
        return "no stated detail left to omit"
    before = draft.description
    others = [d.surface for d in draft.details if d.surface != detail.surface]
    draft.description = _drop_sentence(before, detail.surface, others)
    path = detail.profile_path
    if path is None:
        # Keep the omitted detail where the user simulator answers from it (the solvability constraint); the
        # profile is the runtime's {"persona", "facts": [{"name", "label", "value"}]}.
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


def implicit_assumption(draft: Draft, rng: random.Random, intensity: int) -> Transform | str:
    """The user takes a detail for granted ("my usual ..."). Recovered by looking it up when an earlier golden
    call returns it, else by asking the user to confirm it (it is in their profile)."""
    detail = _remove_detail(draft, rng, lambda d: d.lookup is not None)
    detail = detail or _remove_detail(draft, rng, lambda d: d.profile_path is not None)
    if detail is None:
        return "no stated detail is returned by an earlier golden call or held in the user profile"
    implied = f"my usual {detail.words}" if detail.lookup is None else f"the {detail.words} you have on file"
    before = draft.description
    draft.description = _tidy(_replace(before, detail.surface, implied))
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


INSTRUCTION_TRANSFORMS: dict[str, TransformFn] = {
    "paraphrase": paraphrase,
    "terminology": terminology,
    "ambiguity": ambiguity,
    "implicit_assumption": implicit_assumption,
    "underspecification": underspecification,
}

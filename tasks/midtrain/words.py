"""The reference agent's words and the user's: why the agent makes each call, what it asks, what it reports, how it
refuses; how a user states what they know.

Every move has phrasings that differ in their sentence frame (``envgen.wording``: the function words in order), not
only in their nouns, drawn by the row's seed: the data teaches the reason, not one sentence. A route's ten most
common frames cover at most 30% of its assistant sentences (``VARIED_SENTENCES``), where one phrasing per move
covered 52-76%. The final message is rendered from what the writes did on the database (each write replayed, its
rows compared before and after): it reports every field that changed and every record created with the values the
database holds, and never calls a record changed that is not.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from envgen.compiler import CompiledDomain, Tool
from envgen.customers import written_rows
from envgen.environment import ProfileUserSimulator
from envgen.tools import render_value
from envgen.trajectory_checks import value_texts
from envgen.trajectory_standard import replayed_writes

# --- the agent before a call --------------------------------------------------------------------------------

IDENTIFY = (
    "First I confirm who you are by your {label}.",
    "I identify your account first, by your {label}.",
    "Before anything changes I look you up by your {label}.",
    "Let me find your account with the {label} you gave.",
    "To be sure I act for the right person, I search for your {label}.",
    "Your {label} should lead me to your account.",
    "I start with your account: a lookup by {label}.",
    "Who am I helping? The {label} tells me.",
)
FEED = (
    "This gives the {what} for {nxt}.",
    "{nxt} needs the {what} this returns.",
    "I need the {what} for the next step.",
    "To get the {what}, I read this first.",
    "The {what} comes from this call; {nxt} takes it after.",
    "Next I find the {what} that {nxt} needs.",
    "Here I look up the {what}, which I do not have yet.",
)
CHECK = (
    "I check the {entity} before changing it: its status, and that it is yours.",
    "First a look at the {entity} as it stands, and whose it is.",
    "Let me see the {entity} before I touch it.",
    "Before changing the {entity}, I read it.",
    "I want to confirm the {entity} is yours and can be changed.",
    "A quick check of the {entity} comes first.",
)
LOOK = (
    "I read the {entity} before going on.",
    "A look at the {entity} first.",
    "Let me open the {entity}.",
    "I need to see the {entity} now.",
    "Next, the {entity}.",
)
WRITE = (
    "Everything is in place, so I {purpose}.",
    "Now I can {purpose}.",
    "Next I {purpose}.",
    "With that confirmed, I {purpose}.",
    "All set: time to {purpose}.",
    "I {purpose} now.",
    "That leaves the change itself: I {purpose}.",
    "Nothing stands in the way, so I {purpose}.",
)
SOURCES = {"request": ("from your message", "as you wrote", "which you gave", "that you mentioned",
                       "from your request"),
           "user": ("as you told me", "from your answer", "that you just gave", "which you confirmed"),
           "tool": ("from the {tool} result", "returned by {tool}", "as {tool} showed", "that {tool} found")}
ONE_ARGUMENT = (
    "{Label} {value} {source}.",
    "I pass {value} as the {label}, {source}.",
    "The {label} is {value}, {source}.",
    "For the {label} I use {value}, {source}.",
    "In goes {value} as the {label}; it is {source}.",
)
ARGUMENT = ("{label} {value} {source}", "the {label} {value}, {source}", "{value} for the {label} ({source})")
SEVERAL = ("{Clauses}.", "I pass {clauses}.", "Arguments: {clauses}.", "With {clauses}.")

QUESTION = (
    "To continue I need {labels}. Could you tell me?",
    "Could you tell me {labels}?",
    "What is {labels}?",
    "I need {labels} to go on. Can you share it?",
    "One thing first: {labels}, please?",
    "May I have {labels}?",
    "Before I can do that, what is {labels}?",
)
RETRY = ("Let me run {tool}.", "I try {tool}.", "Running {tool} now.", "A call to {tool} should do it.")
MISTYPED = ("That call failed: I mistyped a value.", "I typed a value wrong there, so it failed.",
            "My mistake: the value was mistyped.", "The error is mine; I entered a value wrongly.")
WHOSE = ("Before anything changes I check whose {what} {key} is.", "Is {what} {key} yours? I check that first.",
         "First I see who {what} {key} belongs to.", "I need to know whose {what} {key} is.")

# --- the agent's last words --------------------------------------------------------------------------------

DONE = ("All done.", "That is taken care of.", "Done.", "Here is what changed.", "It went through.",
        "Everything you asked for is in place.", "", "")
CHANGED = (
    "{Entity} {key} now has {fields}.",
    "I changed {entity} {key}: {fields}.",
    "The {entity} {key} is now set to {fields}.",
    "On {entity} {key}, {fields} as of now.",
    "Your {entity} {key} shows {fields}.",
)
CREATED = (
    "I created {entity} {key} with {fields}.",
    "Your new {entity} is {key}, with {fields}.",
    "A new {entity}, {key}, was added: {fields}.",
    "There is now {entity} {key}: {fields}.",
    "{Entity} {key} is new, with {fields}.",
)
CREATED_BARE = ("I created {entity} {key}.", "Your new {entity} is {key}.", "There is now {entity} {key}.")
CLOSING = ("Let me know if there is anything else.", "I am here if you need more.", "", "", "")
"""Closings ask nothing: a question would keep the user talking after the request is done."""
REFUSE = (
    "{What} {key} is not on your account, so I cannot {purpose}. Only its holder can ask for that.",
    "I checked {what} {key}: it belongs to another customer, so I will not {purpose} for you.",
    "{What} {key} is registered to someone else; I can only change your own records, so I cannot {purpose}.",
    "Sorry, {what} {key} is not yours, and I may {purpose} only for its holder.",
    "That {what}, {key}, is held by another customer. I cannot {purpose} on it.",
)

# --- the user -----------------------------------------------------------------------------------------------

FACT = (
    "My {label} is {value}.",
    "The {label} is {value}.",
    "{Label}: {value}.",
    "It is {value}, my {label}.",
    "Use {value} for the {label}.",
    "For the {label}, {value}.",
    "I have {value} as my {label}.",
    "You will find it under {value} ({label}).",
)
HINT = ("The {label} I mean is {value}.", "I mean the one whose {label} is {value}.",
        "The one I mean has {label} {value}.", "It is the one with {label} {value}.")
REPLY_LEAD = ("", "", "Sure. ", "Of course. ", "Yes: ", "Here you go. ")


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def fill(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` filled, and ``{Name}`` filled capitalized."""
    return template.format(**values, **{cap(k): cap(str(v)) for k, v in values.items()})


def fact_sentence(label: str, value: str, rng: random.Random, hint: bool = False) -> str:
    """How a user states one fact (``hint``: a fact that singles out a row of a list, "The price I mean is 9.50.")."""
    return fill(rng.choice(HINT if hint else FACT), label=label, value=value)


def spoken_request(description: str, facts: Sequence[Mapping[str, Any]], rng: random.Random) -> str:
    """The request as the user writes it: each "My <label> is <value>." (or "The <label> I mean is <value>.")
    sentence of the task text in one of the user's phrasings."""
    for f in facts:
        hint = "." in f["name"]
        sentence = f"The {f['label']} I mean is {f['value']}." if hint else f"My {f['label']} is {f['value']}."
        if sentence in description:
            description = description.replace(sentence, fact_sentence(f["label"], f["value"], rng, hint), 1)
    return description


class SpeakingUser(ProfileUserSimulator):
    """The profile-grounded user (``envgen.environment``), stating facts in the user's phrasings."""

    def __init__(self, task: Mapping[str, Any], rng: random.Random) -> None:
        super().__init__(dict(task))
        self.rng = rng
        self.description = spoken_request(str(task["description"]), self.facts, rng)

    def say(self, fact: Mapping[str, Any]) -> str:
        return fact_sentence(fact["label"], fact["value"], self.rng, "." in fact["name"])

    def reply(self, assistant_text: str, final_write_done: bool) -> tuple[str, bool]:
        text, done = super().reply(assistant_text, final_write_done)
        lead = self.rng.choice(REPLY_LEAD) if any(f["value"] in text for f in self.facts) else ""
        return lead + text, done


# --- reasoning --------------------------------------------------------------------------------------------


def label(param: str) -> str:
    return param.replace("_", " ")


def purpose(tool: Tool) -> str:
    """The tool's description up to its first clause, lower-cased, without the fee it names ("add full coverage
    to a rental", not "... for 60.00": a figure the agent states is one the database holds): what the call does."""
    text = tool.description.split(". ")[0].split("; ")[0].rstrip(".")
    text = re.sub(r"\s+(?:for|of|at)\s+(?:an?\s+)?\d+(?:\.\d+)?(?:\s+(?:fee|charge|each))?\b", "", text)
    return text[0].lower() + text[1:]


def source(value: Any, messages: Sequence[Mapping[str, Any]], request: str, rng: random.Random) -> str:
    """Where a value was first seen, in words: the request, a user reply, or a tool result (named)."""
    texts = value_texts(value)
    if any(t in request for t in texts):
        return rng.choice(SOURCES["request"])
    for m in messages[2:]:
        if any(t in str(m.get("content") or "") for t in texts):
            if m["role"] == "user":
                return rng.choice(SOURCES["user"])
            if m["role"] == "tool":
                return rng.choice(SOURCES["tool"]).format(tool=m.get("name") or "an earlier")
    return "from our conversation"


def arguments_sentence(arguments: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], request: str,
                       rng: random.Random) -> str:
    """Each argument's value and where it comes from, in one sentence."""
    items = [(label(p), render_value(v), source(v, messages, request, rng)) for p, v in arguments.items()]
    if not items:
        return ""
    if len(items) == 1:
        name, value, whence = items[0]
        return fill(rng.choice(ONE_ARGUMENT), label=name, value=value, source=whence)
    clauses = [fill(rng.choice(ARGUMENT), label=n, value=v, source=s) for n, v, s in items]
    joined = "; ".join(clauses[:-1]) + f"{rng.choice(('; ', ' and '))}{clauses[-1]}"
    return fill(rng.choice(SEVERAL), clauses=joined)


def reasoning(domain: CompiledDomain, calls: Sequence[Mapping[str, Any]], k: int,
              messages: Sequence[Mapping[str, Any]], request: str, rng: random.Random) -> str:
    """Why call ``k`` now and where each argument comes from, written from the graph: identifying the customer,
    what the next call needs of its result (an edge of the dependency graph), a check of the record a later write
    changes, or the write itself; then each argument's source."""
    call = calls[k]
    tool = domain.tools[call["name"]]
    entity = tool.entity.replace("_", " ")
    nxt = calls[k + 1]["name"] if k + 1 < len(calls) else None
    customer = domain.spec.customer_entity
    written = {(e, render_value(v)) for c in calls[k + 1:] if domain.tools[c["name"]].is_write
               for e, v in written_rows(domain, c["name"], c["arguments"])[:1]}
    key = domain.spec.entity(tool.entity).key
    if tool.is_write:
        why = fill(rng.choice(WRITE), purpose=purpose(tool))
    elif customer is not None and tool.entity == customer.name and k == 0:
        why = fill(rng.choice(IDENTIFY), label=label(next(iter(call["arguments"]), "details")))
    elif nxt is not None and domain.graph.has_edge(tool.name, nxt):
        types = sorted(domain.graph.edges[tool.name, nxt]["types"])
        what = " and ".join(t.split(".")[-1].replace("_", " ") for t in types)
        why = fill(rng.choice(FEED), what=what, nxt=nxt)
    elif (tool.entity, render_value(call["arguments"].get(key))) in written:
        why = fill(rng.choice(CHECK), entity=entity)
    else:
        why = fill(rng.choice(LOOK), entity=entity)
    args = arguments_sentence(call["arguments"], messages, request, rng)
    return f"{why} {args}".strip()


def question(labels: Sequence[str], rng: random.Random) -> str:
    """The agent asks the user for facts (each named by its label, which the user recognizes)."""
    return fill(rng.choice(QUESTION), labels=" and ".join(f"your {name}" for name in labels))


# --- the final message ----------------------------------------------------------------------------------------


def shown(value: Any) -> str:
    """A value as the agent says it: a flag in words (yes, no), an amount with two decimals."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return render_value(value)


def _fields(domain: CompiledDomain, entity: str, record: Mapping[str, Any], names: Sequence[str]) -> str:
    spec = domain.spec.entity(entity)
    parts = []
    for name in names:
        field = spec.field(name)
        said = field.label if field is not None and field.label else label(name)
        parts.append(f"{said} {shown(record[name])}")
    return ", ".join(parts)


def _reported(domain: CompiledDomain, entity: str, record: Mapping[str, Any]) -> list[str]:
    """What a person is told of a new record: its amounts, counts, dates and states (not its links)."""
    spec = domain.spec.entity(entity)
    return [f.name for f in spec.fields if record.get(f.name) is not None and not f.internal
            and f.type in ("money", "int", "float", "date", "datetime", "enum", "bool")]


def write_sentences(domain: CompiledDomain, write: Mapping[str, Any], rng: random.Random) -> list[str]:
    """What one replayed write did (``envgen.trajectory_standard.replayed_writes``): the fields of each row it
    names that changed, with the values the database now holds, and each record it created."""
    out = []
    for (entity, key), before in write["named"].items():
        after = write["after_named"].get((entity, key))
        if before is None or after is None:
            continue
        changed = [c for c in after if after[c] != before.get(c)]
        if changed:
            out.append(fill(rng.choice(CHANGED), entity=entity.replace("_", " "), key=render_value(key),
                            fields=_fields(domain, entity, after, changed)))
    for entity, record in write["created"].items():
        spec = domain.spec.entity(entity)
        fields = _reported(domain, entity, record)
        name, new = entity.replace("_", " "), render_value(record.get(spec.key, ""))
        out.append(fill(rng.choice(CREATED), entity=name, key=new, fields=_fields(domain, entity, record, fields))
                   if fields else fill(rng.choice(CREATED_BARE), entity=name, key=new))
    return out


def final_text(domain: CompiledDomain, db: bytes, calls: Sequence[Mapping[str, Any]], rng: random.Random) -> str:
    """The closing message: what the writes of ``calls`` (the successful calls, in order) did, replayed on a copy
    of ``db`` so every value is the one the database holds."""
    said = [s for w in replayed_writes(domain, db, calls) for s in write_sentences(domain, w, rng)]
    if not said:
        return f"{rng.choice([d for d in DONE if d])} Nothing needed to change."
    return " ".join(x for x in (rng.choice(DONE), *said, rng.choice(CLOSING)) if x)


def refusal(what: str, key: str, tool: Tool, rng: random.Random) -> str:
    return fill(rng.choice(REFUSE), what=what, key=key, purpose=purpose(tool))


def whose(what: str, key: str, rng: random.Random) -> str:
    return fill(rng.choice(WHOSE), what=what, key=key)


def retry_texts(tool: str, rng: random.Random) -> tuple[str, str]:
    """(the failed try's words, the words that say why it failed)."""
    return fill(rng.choice(RETRY), tool=tool), rng.choice(MISTYPED)


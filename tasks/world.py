"""The synthetic world: a knowledge graph, one encyclopedia document per entity, and verified multi-hop questions.

It is the embedded default seed source for KeyChain, built the way LongCat-Flash-Thinking-2601 builds QA for search
("Graph-based QA Synthesis for Search"): a relational entity graph (here generated with Faker instead of crawled
from Wikipedia), connected subgraphs sampled as reasoning paths, questions that obfuscate names, numbers, places and
dates ("a city founded in the 1870s", "an organisation with about 4,000 employees"), and answer-uniqueness
verification: the obfuscated constraints are re-evaluated over the whole graph and a question is kept only if
exactly one answer satisfies them. On a conflict the report adds attributes of the ground-truth entity and
re-synthesizes; so does this stage, within ``max_constraints`` and ``max_retries``, then rejects with the reason.

Every relation is functional from its subject (a person has one birthplace, an organisation one founder), so a
question is a set of attribute constraints on an anchor plus a relation path; the check intersects indexed
attribute buckets and follows integer relation arrays (numpy), a few microseconds per candidate.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import polars as pl
from pydantic import Field, model_validator

from data_contracts.schemas import extend, in_set, not_null, record_contract, unique
from data_contracts.stage import REJECTED, REJECTED_CONTRACT, Contract, Expect, Params, seed_for, stage
from envgen.rewards import normalize
from tasks.qa_seeds import QA_SEED_COLUMNS, eval_split, qa_seed_contract, rejected_frame

STAGE = "world"
SEASONS = ("winter", "spring", "summer", "autumn")
OCCUPATIONS = (
    "chemist", "architect", "novelist", "physician", "lawyer", "engineer", "journalist", "painter", "economist",
    "historian", "composer", "teacher", "pilot", "banker", "sculptor", "botanist", "diplomat", "geologist",
    "photographer", "surgeon", "actor", "singer", "entrepreneur", "mathematician", "astronomer", "chef", "farmer",
    "politician", "librarian", "cartographer",
)
INDUSTRIES = (
    "shipping", "publishing", "software", "mining", "textile", "brewing", "banking", "insurance", "railway",
    "aerospace", "pharmaceutical", "film", "retail", "telecommunications", "steel", "automotive", "chemical",
    "construction", "energy", "food",
)
WORK_KINDS = ("novel", "film", "album")
EVENT_KINDS = ("festival", "conference", "marathon", "exhibition", "summit", "tournament")
CATEGORIES = {"person": OCCUPATIONS, "organization": INDUSTRIES, "work": WORK_KINDS, "event": EVENT_KINDS}
# Where a place has a common short form, answers accept it (the LoongRL verifier must not fail "USA").
COUNTRY_ALIASES = {
    "United States of America": ["United States", "USA", "US", "America"],
    "United Kingdom": ["UK", "Britain", "Great Britain"],
    "Russian Federation": ["Russia"],
    "Korea": ["South Korea", "Republic of Korea"],
    "Netherlands": ["Holland", "The Netherlands"],
    "Czech Republic": ["Czechia"],
    "Myanmar": ["Burma"],
}
TYPE_SHARE = (("city", 0.2), ("person", 0.4), ("organization", 0.15), ("work", 0.15), ("event", 0.1))
TYPE_NOUN = {"person": "a person", "organization": "an organisation", "city": "a city", "country": "a country",
             "work": "a work", "event": "an event"}


@dataclass(frozen=True)
class Relation:
    """A functional relation subject -> object, with how a question asks for its object and names it in a phrase.
    ``{x}`` is the subject's description; ``by_kind`` overrides both for a subject category (a film is directed)."""

    subject: str
    object: str
    ask: str
    phrase: str
    by_kind: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def texts(self, kind: str | None) -> tuple[str, str]:
        return self.by_kind.get(kind or "", (self.ask, self.phrase))


RELATIONS: dict[str, Relation] = {
    "located_in": Relation("city", "country", "In which country is {x} located?", "the country where {x} lies"),
    "born_in": Relation("person", "city", "In which city was {x} born?", "the birthplace of {x}"),
    "works_for": Relation("person", "organization", "Which organisation employs {x}?", "the employer of {x}"),
    "married_to": Relation("person", "person", "Who is married to {x}?", "the spouse of {x}"),
    "founded_by": Relation("organization", "person", "Who founded {x}?", "the founder of {x}"),
    "headquartered_in": Relation("organization", "city", "In which city is {x} headquartered?",
                                 "the city where {x} is headquartered"),
    "created_by": Relation("work", "person", "Who created {x}?", "the creator of {x}", {
        "novel": ("Who wrote {x}?", "the author of {x}"),
        "film": ("Who directed {x}?", "the director of {x}"),
        "album": ("Which artist recorded {x}?", "the artist who recorded {x}"),
    }),
    "published_by": Relation("work", "organization", "Which company released {x}?", "the company that released {x}"),
    "organized_by": Relation("event", "organization", "Which organisation organised {x}?", "the organiser of {x}"),
    "held_in": Relation("event", "city", "In which city was {x} held?", "the city that hosted {x}"),
}
OUT_RELATIONS = {t: [r for r, rel in RELATIONS.items() if rel.subject == t] for t in TYPE_NOUN}
IN_RELATIONS = {t: [r for r, rel in RELATIONS.items() if rel.object == t] for t in TYPE_NOUN}
# The year a bridge question may ask for instead of a name: (attribute, question template).
YEAR_ASKS = {
    "person": ("born", "In what year was {x} born?"), "organization": ("founded", "In what year was {x} founded?"),
    "city": ("founded", "In what year was {x} founded?"), "work": ("released", "In what year was {x} released?"),
    "event": ("held", "In what year did {x} take place?"),
}
# Comparison questions: (type, attribute, question template, +1 when the larger value wins).
COMPARISONS = (
    ("organization", "founded", "Which was founded earlier: {a} or {b}?", -1),
    ("organization", "employees", "Which has more employees: {a} or {b}?", +1),
    ("city", "population", "Which has the larger population: {a} or {b}?", +1),
    ("city", "founded", "Which was founded more recently: {a} or {b}?", +1),
    ("person", "born", "Who was born first: {a} or {b}?", -1),
    ("work", "released", "Which was released first: {a} or {b}?", -1),
    ("event", "attendance", "Which drew more attendees: {a} or {b}?", +1),
)
NUMERIC = ("population", "employees", "budget", "attendance", "founded")
DATES = ("born", "released", "held")
# Obfuscating constraints per type: (attribute, operator). "about" rounds to two significant figures, "decade" and
# "season" blur a year or a date, "initial" gives the first letter of a surname (of a name, for the other types),
# "is" names the category.
CONSTRAINTS = {
    "person": (("category", "is"), ("born", "season"), ("born", "decade"), ("name", "initial")),
    "organization": (("category", "is"), ("founded", "decade"), ("employees", "about"), ("budget", "about"),
                     ("name", "initial")),
    "city": (("founded", "decade"), ("population", "about"), ("name", "initial")),
    "country": (("population", "about"),),
    "work": (("category", "is"), ("released", "season"), ("released", "decade"), ("name", "initial")),
    "event": (("category", "is"), ("held", "season"), ("attendance", "about"), ("name", "initial")),
}


# --------------------------------------------------------------------------- params


class WorldParams(Params):
    seed: int = Field(0, description="world seed: the graph depends on (seed, n_entities) only")
    n_entities: int = Field(2000, ge=60, description="entities in the graph (people, organisations, places, "
                                                     "works, events)")
    n_questions: int = Field(500, ge=0, description="questions to synthesize in this partition")
    min_hops: int = Field(2, ge=2, le=4, description="fewest supporting documents a question needs")
    max_hops: int = Field(4, ge=2, le=4, description="most supporting documents a question needs")
    comparison_fraction: float = Field(0.3, ge=0.0, le=1.0, description="share of comparison questions "
                                                                        "(the rest are bridge questions)")
    year_fraction: float = Field(0.2, ge=0.0, le=1.0, description="share of bridge questions asking for a year "
                                                                  "rather than a name")
    eval_fraction: float = Field(0.05, ge=0.0, le=1.0, description="share of questions in the eval split "
                                                                   "(by question hash)")
    n_distractors: int = Field(3, ge=0, le=20, description="non-supporting related documents per seed "
                                                           "(partial matches and graph neighbours)")
    max_constraints: int = Field(4, ge=1, le=5, description="most obfuscated attributes describing one anchor")
    max_retries: int = Field(8, ge=1, le=100, description="re-syntheses before a question is rejected")

    @model_validator(mode="after")
    def _hop_range(self) -> WorldParams:
        if self.min_hops > self.max_hops:
            raise ValueError(f"min_hops ({self.min_hops}) must not exceed max_hops ({self.max_hops}); "
                             "set them so 2 <= min_hops <= max_hops <= 4")
        return self


# --------------------------------------------------------------------------- the graph


def _about(value: int) -> int:
    """Two significant figures: the bucket an "about N" constraint names."""
    if value < 100:
        return value
    scale = 10 ** (len(str(value)) - 2)
    return (value + scale // 2) // scale * scale


def _season(d: date) -> int:
    return (d.month % 12) // 3  # Dec, Jan, Feb -> winter (of the date's own year)


def bucket(t: str, attr: str, op: str, value: Any) -> int:
    """The integer bucket of one attribute value under an operator (the key of the uniqueness index)."""
    if op == "about":
        return _about(value)
    if op == "decade":
        year = value.year if isinstance(value, date) else value
        return year // 10 * 10
    if op == "season":
        return value.year * 4 + _season(value)
    if op == "initial":  # a person's surname: the last alphabetic word ("John Q. Smith" -> "S")
        words = [w for w in value.split() if w[0].isalpha() and not w.endswith(".")]
        return ord((words[-1] if t == "person" else words[0])[0].upper())
    return value  # "is": the category index


class World:
    """The generated graph: entity records, integer relation arrays and the constraint index."""

    def __init__(self, seed: int, n_entities: int) -> None:
        from faker import Faker

        self.seed, self.n = seed, n_entities
        self.fake = Faker("en_US")
        counts = {"country": min(max(6, n_entities // 150), 60)}
        rest = n_entities - counts["country"]
        for t, share in TYPE_SHARE:
            counts[t] = int(rest * share)
        counts["event"] += n_entities - sum(counts.values())
        self.types: list[str] = [t for t in ("country", *(t for t, _ in TYPE_SHARE)) for _ in range(counts[t])]
        self.offsets = {t: self.types.index(t) for t in counts}
        self.counts = counts
        self.records: list[dict[str, Any]] = [{} for _ in range(n_entities)]
        self.rel = {r: np.full(n_entities, -1, dtype=np.int64) for r in RELATIONS}
        self._names: set[str] = set()
        for i in range(n_entities):
            self._make(i)
        for i in range(n_entities):
            self._link(i)
        self.buckets = self._buckets()
        self.index = {key: _group(values) for key, values in self.buckets.items()}
        self.inverse = {r: _group(arr) for r, arr in self.rel.items()}
        self.years = {attr: np.array([-1 if rec.get(attr) is None else getattr(rec[attr], "year", rec[attr])
                                      for rec in self.records], dtype=np.int64) for attr in ("founded", *DATES)}

    # ---- entities
    def rng(self, purpose: str, i: int) -> random.Random:
        return random.Random(seed_for(self.seed, STAGE, purpose, i))

    def _pick(self, rng: random.Random, t: str, ok: Any = None, tries: int = 6) -> int:
        """A random entity of type ``t``, preferring one for which ``ok(j)`` holds (bounded tries)."""
        j = self.offsets[t] + rng.randrange(self.counts[t])
        for _ in range(tries):
            if ok is None or ok(j):
                break
            j = self.offsets[t] + rng.randrange(self.counts[t])
        return j

    def _unique_name(self, draw: Any, rng: random.Random) -> str:
        for _ in range(20):
            name = draw()
            if normalize(name) not in self._names:
                break
        else:  # a crowded name space: a distinguishing numeral keeps names unique
            name = f"{name} {rng.randint(2, 99)}"
            while normalize(name) in self._names:
                name = f"{name} {rng.randint(2, 99)}"
        self._names.add(normalize(name))
        return name

    def _make(self, i: int) -> None:
        t, fake = self.types[i], self.fake
        fake.seed_instance(seed_for(self.seed, STAGE, "entity", i))
        rng = fake.random
        rec: dict[str, Any] = {"type": t}
        if t == "country":
            rec["name"] = self._unique_name(lambda: _plain_country(fake), rng)
            rec["population"] = int(10 ** rng.uniform(5.7, 8.3))
        elif t == "city":
            rec["name"] = self._unique_name(fake.city, rng)
            rec["founded"] = rng.randint(1500, 1950)
            rec["population"] = int(10 ** rng.uniform(3.3, 6.7))
            self.rel["located_in"][i] = self._pick(rng, "country")
        elif t == "person":
            middle = f" {fake.random_uppercase_letter()}." if rng.random() < 0.5 else ""
            rec["name"] = self._unique_name(lambda: f"{fake.first_name()}{middle} {fake.last_name()}", rng)
            rec["born"] = date(rng.randint(1850, 1995), rng.randint(1, 12), rng.randint(1, 28))
            rec["category"] = rng.randrange(len(OCCUPATIONS))
            born = rec["born"].year
            self.rel["born_in"][i] = self._pick(rng, "city", lambda j: self.records[j]["founded"] <= born)
        elif t == "organization":
            rec["name"] = self._unique_name(fake.company, rng)
            rec["category"] = rng.randrange(len(INDUSTRIES))
            founder = self._pick(rng, "person", lambda j: self.records[j]["born"].year <= 1990)
            self.rel["founded_by"][i] = founder
            rec["founded"] = min(self.records[founder]["born"].year + rng.randint(22, 55), 2022)
            rec["employees"] = int(10 ** rng.uniform(1.3, 5.3))
            rec["budget"] = int(10 ** rng.uniform(5.5, 9.5))
            founded = rec["founded"]
            self.rel["headquartered_in"][i] = self._pick(rng, "city", lambda j: self.records[j]["founded"] <= founded)
        elif t == "work":
            kind = rng.randrange(len(WORK_KINDS))
            rec["category"] = kind
            rec["name"] = self._unique_name(lambda: _title(fake, rng), rng)
            creator = self._pick(rng, "person", lambda j: self.records[j]["born"].year <= 1990)
            self.rel["created_by"][i] = creator
            year = min(self.records[creator]["born"].year + rng.randint(20, 60), 2023)
            rec["released"] = date(year, rng.randint(1, 12), rng.randint(1, 28))
        else:  # event
            kind = rng.randrange(len(EVENT_KINDS))
            rec["category"] = kind
            rec["name"] = self._unique_name(
                lambda: f"{fake.word(part_of_speech='adjective').title()} {fake.word(part_of_speech='noun').title()} "
                        f"{EVENT_KINDS[kind].title()}", rng)
            rec["attendance"] = int(10 ** rng.uniform(2.3, 5.3))
            self.rel["held_in"][i] = self._pick(rng, "city")
        self.records[i] = rec

    def _link(self, i: int) -> None:
        """Relations to entities made later (an employer, a spouse, a publisher, an organiser)."""
        t, rec = self.types[i], self.records[i]
        rng = self.rng("link", i)
        if t == "person":
            born = rec["born"].year
            self.rel["works_for"][i] = self._pick(rng, "organization",
                                                  lambda j: born + 18 >= self.records[j]["founded"] - 40)
            if self.rel["married_to"][i] < 0 and rng.random() < 0.4:
                spouse = self._pick(rng, "person", lambda j: j != i and self.rel["married_to"][j] < 0
                                    and abs(self.records[j]["born"].year - born) <= 12)
                if spouse != i and self.rel["married_to"][spouse] < 0:
                    self.rel["married_to"][i], self.rel["married_to"][spouse] = spouse, i
        elif t == "work":
            year = rec["released"].year
            self.rel["published_by"][i] = self._pick(rng, "organization",
                                                     lambda j: self.records[j]["founded"] <= year)
        elif t == "event":
            org = self._pick(rng, "organization", lambda j: self.records[j]["founded"] <= 2015)
            self.rel["organized_by"][i] = org
            founded = self.records[org]["founded"]
            rec["held"] = date(rng.randint(min(founded + 1, 2023), 2023), rng.randint(1, 12), rng.randint(1, 28))

    def _buckets(self) -> dict[tuple[str, str, str], np.ndarray]:
        out = {}
        for t, constraints in CONSTRAINTS.items():
            lo, hi = self.offsets[t], self.offsets[t] + self.counts[t]
            for attr, op in constraints:
                arr = np.full(self.n, -1, dtype=np.int64)
                arr[lo:hi] = [bucket(t, attr, op, self.records[i][attr]) for i in range(lo, hi)]
                out[(t, attr, op)] = arr
        return out

    # ---- derived views
    def name(self, i: int) -> str:
        return self.records[i]["name"]

    def kind(self, i: int) -> str | None:
        cats = CATEGORIES.get(self.types[i])
        return cats[self.records[i]["category"]] if cats else None

    @cached_property
    def aliases(self) -> list[list[str]]:
        return [_aliases(rec, self._names) for rec in self.records]

    def satisfying(self, t: str, constraints: Sequence[tuple[str, str, int]]) -> np.ndarray:
        """Entities of type ``t`` in every constraint's bucket: the smallest bucket, filtered by the others."""
        lists = [self.index[(t, a, o)].get(v, _EMPTY) for a, o, v in constraints]
        order = np.argsort([len(x) for x in lists])
        cands = lists[order[0]]
        for k in order[1:]:
            a, o, v = constraints[k]
            cands = cands[self.buckets[(t, a, o)][cands] == v]
        return cands

    def follow(self, cands: np.ndarray, path: Sequence[str]) -> np.ndarray:
        """The end entities of ``path`` from every candidate (with repeats: uniqueness is the caller's test)."""
        for r in path:
            cands = self.rel[r][cands]
            cands = cands[cands >= 0]
        return cands


_EMPTY = np.zeros(0, dtype=np.int64)


def _group(values: np.ndarray) -> dict[int, np.ndarray]:
    """value -> sorted indices holding it (values < 0 mean "none")."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    keys, starts = np.unique(sorted_values, return_index=True)
    bounds = [*starts[1:], len(values)]
    return {int(k): order[s:e] for k, s, e in zip(keys, starts, bounds, strict=True) if k >= 0}


def _plain_country(fake: Any, tries: int = 10) -> str:
    """A country name without commas, brackets or "and" (they would read as lists of candidates)."""
    for _ in range(tries):
        name = fake.country()
        if len(name.split()) <= 3 and not any(c in name for c in ",()") and " and " not in name:
            break
    return name


def _title(fake: Any, rng: random.Random) -> str:
    adj, noun = fake.word(part_of_speech="adjective").title(), fake.word(part_of_speech="noun").title()
    other = fake.word(part_of_speech="noun").title()
    return rng.choice((f"The {adj} {noun}", f"{noun} of the {other}", f"{adj} {noun}s", f"A {noun} for {other}"))


def _aliases(rec: Mapping[str, Any], names: set[str]) -> list[str]:
    """Other accepted forms of an entity's name, never another entity's name. Organisations get none: "Martinez"
    for "Martinez LLC" would also accept "Carlos Martinez", and the two-way reward already takes the bare name."""
    name, out = rec["name"], []
    if rec["type"] == "person":
        parts = name.split()
        if len(parts) == 3 and parts[1].endswith("."):
            out.append(f"{parts[0]} {parts[2]}")
    elif rec["type"] == "country":
        out += COUNTRY_ALIASES.get(name, [])
    # ``names`` holds every normalized name, this one's included: an alias equal to it after normalization
    # ("George A. Foster" -> "george foster", the article rule) adds nothing, one equal to another's is wrong.
    return [a for a in out if normalize(a) not in names]


# --------------------------------------------------------------------------- documents


def _fmt_date(d: date) -> str:
    return f"{d:%B} {d.day}, {d.year}"


def _fmt_number(n: int) -> str:
    return f"{n:,}"


def render_document(world: World, i: int) -> str:
    """An encyclopedia-like article stating every fact of entity ``i`` (several templates per fact), plus the
    facts in which it is the object ("Notable people born in ...", "Its employees include ...")."""
    w, rec, t = world, world.records[i], world.types[i]
    rng = w.rng("doc", i)
    name = rec["name"]
    ref = {r: w.name(int(arr[i])) for r, arr in w.rel.items() if arr[i] >= 0}

    def pick(*options: str) -> str:
        return rng.choice(options)

    def inverse(relation: str, template: str, limit: int = 3, prefix: str = "") -> list[str]:
        subjects = w.inverse[relation].get(i, _EMPTY)[:limit]
        return [template.format(_join([prefix + w.name(int(e)) for e in subjects]))] if len(subjects) else []

    if t == "country":
        pop = _fmt_number(rec["population"])
        paragraphs = [[pick(f"{name} is a sovereign state with a population of {pop}.",
                            f"{name} is a country of {pop} inhabitants.")],
                      inverse("located_in", "Its cities include {}.", 4)]
    elif t == "city":
        country, founded, pop = ref["located_in"], rec["founded"], _fmt_number(rec["population"])
        paragraphs = [
            [pick(f"{name} is a city in {country}.", f"{name} is a municipality located in {country}."),
             pick(f"It was founded in {founded}.", f"The settlement dates from {founded}, the year it was founded."),
             pick(f"As of the last census the city had a population of {pop}.", f"{name} is home to {pop} people.")],
            inverse("born_in", f"Notable people born in {name} include {{}}.")
            + inverse("headquartered_in", "Organisations headquartered in the city include {}.")
            + inverse("held_in", f"{name} has hosted {{}}.", prefix="the "),
        ]
    elif t == "person":
        job, born, city = OCCUPATIONS[rec["category"]], _fmt_date(rec["born"]), ref["born_in"]
        career = [pick(f"{name} works for {ref['works_for']}.", f"{name} is employed by {ref['works_for']}.")]
        if "married_to" in ref:
            spouse = ref["married_to"]
            career.append(pick(f"{name} is married to {spouse}.", f"{name}'s spouse is {spouse}."))
        paragraphs = [
            [pick(f"{name} (born {born}) is {_article(job)}.", f"{name} is {_article(job)} who was born on {born}."),
             pick(f"{name.split()[0]} was born in {city}.", f"A native of {city}, {name} grew up there.")],
            career,
            inverse("founded_by", f"{name} founded {{}}.") + inverse("created_by", f"Works by {name} include {{}}."),
        ]
    elif t == "organization":
        industry, founder, founded = INDUSTRIES[rec["category"]], ref["founded_by"], rec["founded"]
        staff = _fmt_number(rec["employees"])
        paragraphs = [
            [pick(f"{name} is {_article(industry)} company founded in {founded} by {founder}.",
                  f"{name} is {_article(industry)} company. It was founded by {founder} in {founded}."),
             pick(f"The company is headquartered in {ref['headquartered_in']}.",
                  f"Its headquarters are in {ref['headquartered_in']}.")],
            [pick(f"{name} employs {staff} people.", f"The company has {staff} employees."),
             f"Its annual budget is ${_fmt_number(rec['budget'])}."]
            + inverse("works_for", "Its employees include {}."),
            inverse("published_by", f"{name} has released {{}}.") + inverse("organized_by", "It organised {}.", prefix="the "),
        ]
    elif t == "work":
        kind, creator, released = WORK_KINDS[rec["category"]], ref["created_by"], _fmt_date(rec["released"])
        verb = {"novel": "written by", "film": "directed by", "album": "recorded by"}[kind]
        paragraphs = [[pick(f"{name} is {_article(kind)} {verb} {creator}.",
                            f"{name} is {_article(kind)}; it was {verb} {creator}."),
                       pick(f"It was released on {released} by {ref['published_by']}.",
                            f"{ref['published_by']} released it on {released}.")]]
    else:  # event
        kind, city, held = EVENT_KINDS[rec["category"]], ref["held_in"], _fmt_date(rec["held"])
        crowd = _fmt_number(rec["attendance"])
        paragraphs = [[pick(f"The {name} was {_article(kind)} held in {city} on {held}.",
                            f"The {name} took place in {city} on {held}; it was {_article(kind)}."),
                       pick(f"It was organised by {ref['organized_by']}.", f"{ref['organized_by']} organised the event."),
                       pick(f"It was attended by {crowd} people.", f"Attendance reached {crowd}.")]]
    return "\n\n".join(" ".join(p) for p in paragraphs if p)


def _join(names: Sequence[str]) -> str:
    if len(names) <= 2:
        return " and ".join(names)
    sep = "; " if any("," in n for n in names) else ", "  # company names hold commas ("Wells, Carpenter and Jacobs")
    return f"{sep.join(names[:-1])}{sep.strip()} and {names[-1]}"


# --------------------------------------------------------------------------- questions

Constraint = tuple[str, str, int]


class Conflict(Exception):
    """This synthesis attempt failed (dead end, tie, non-unique answer); the message is the rejection reason."""


def _article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _amount(v: int) -> str:
    if v >= 1_000_000_000:
        return f"{v / 1e9:g} billion"
    return f"{v / 1e6:g} million" if v >= 1_000_000 else _fmt_number(v)


def describe(t: str, constraints: Sequence[Constraint]) -> str:
    """The obfuscated description of an anchor: "a chemist born in the spring of 1961"."""
    noun, phrases = TYPE_NOUN[t], []
    for attr, op, v in constraints:
        if op == "is":
            noun = _article(f"{INDUSTRIES[v]} company" if t == "organization" else CATEGORIES[t][v])
        elif op == "season":
            verb = {"born": "born", "released": "released", "held": "held"}[attr]
            phrases.append(f"{verb} in the {SEASONS[v % 4]} of {v // 4}")
        elif op == "decade":
            phrases.append(f"{'born' if attr == 'born' else attr} in the {v}s")
        elif op == "initial":
            what = {"person": "surname", "work": "title"}.get(t, "name")
            phrases.append(f"whose {what} begins with {chr(v)}")
        elif attr == "employees":
            phrases.append(f"with about {_amount(v)} employees")
        elif attr == "budget":
            phrases.append(f"with an annual budget of about ${_amount(v)}")
        elif attr == "population":
            phrases.append(f"with a population of about {_amount(v)}")
        else:  # attendance
            phrases.append(f"attended by about {_amount(v)} people")
    phrases.sort(key=lambda phrase: phrase.startswith("whose"))  # "born in the 1870s and whose surname ..."
    return " ".join([noun, " and ".join(phrases)]).strip()


def _phrase(world: World, subject: int, relation: str, x: str, final: bool) -> str:
    ask, phrase = RELATIONS[relation].texts(world.kind(subject))
    return (ask if final else phrase).format(x=x)


@dataclass
class Side:
    """One reasoning path: an anchor described by constraints, then functional relations to the end entity."""

    anchor: int
    path: list[str]
    constraints: list[Constraint] = field(default_factory=list)

    def entities(self, world: World) -> list[int]:
        out = [self.anchor]
        for r in self.path:
            out.append(int(world.rel[r][out[-1]]))
        return out

    def phrase(self, world: World) -> str:
        x, ents = describe(world.types[self.anchor], self.constraints), self.entities(world)
        for subject, r in zip(ents, self.path, strict=False):
            x = _phrase(world, subject, r, x, final=False)
        return x


def _make_unique(world: World, rng: random.Random, side: Side, max_constraints: int, exclude: str | None,
                 year: str | None = None) -> None:
    """Add attributes of the anchor until the constraints, evaluated over the whole graph and followed along the
    path, reach exactly one answer (LongCat: on a multi-answer conflict, add attributes and re-synthesize)."""
    t, a = world.types[side.anchor], side.anchor
    available = [(attr, op, int(world.buckets[(t, attr, op)][a])) for attr, op in CONSTRAINTS[t] if attr != exclude]
    rng.shuffle(available)
    # One constraint per attribute: "born in the 1960s and in the spring of 1961" says the second twice.
    available = [c for k, c in enumerate(available) if c[0] not in {d[0] for d in available[:k]}]
    answers = _EMPTY
    for n in range(1, min(max_constraints, len(available)) + 1):
        ends = world.follow(world.satisfying(t, available[:n]), side.path)
        answers = world.years[year][ends] if year else ends
        if (answers == answers[0]).all():  # the anchor itself satisfies the constraints, so answers is not empty
            side.constraints = available[:n]
            return
    raise Conflict(f"answer not unique: {len(np.unique(answers))} answers satisfy the {t} anchor's constraints "
                   f"(at most {max_constraints} attributes)")


def _bridge(world: World, rng: random.Random, hops: int, p: WorldParams) -> dict[str, Any]:
    anchor = rng.randrange(world.offsets["city"], world.n)  # every type but country has an outgoing relation
    side, seen, cur = Side(anchor, []), {anchor}, anchor
    for step in range(hops - 1):
        last = step == hops - 2
        # Before the last step, never into a type with no way on (a country): the walk would strand there.
        options = [r for r in OUT_RELATIONS[world.types[cur]] if world.rel[r][cur] >= 0
                   and world.rel[r][cur] not in seen and (last or OUT_RELATIONS[world.types[world.rel[r][cur]]])]
        if not options:
            raise Conflict("dead end: no unvisited relation to follow")
        r = rng.choice(options)
        side.path.append(r)
        cur = int(world.rel[r][cur])
        seen.add(cur)
    end_type = world.types[cur]
    year = YEAR_ASKS[end_type][0] if end_type in YEAR_ASKS and rng.random() < p.year_fraction else None
    _make_unique(world, rng, side, p.max_constraints, exclude=None, year=year)
    if year:
        question, answer, aliases = YEAR_ASKS[end_type][1].format(x=side.phrase(world)), str(world.years[year][cur]), []
    else:
        inner = Side(anchor, side.path[:-1], side.constraints).phrase(world)
        question = _phrase(world, side.entities(world)[-2], side.path[-1], inner, final=True)
        answer, aliases = world.name(cur), world.aliases[cur]
    return {"type": "bridge", "question": question, "answer": answer, "aliases": aliases, "sides": [side],
            "ask": year or "name", "compare": None, "answer_entity": cur}


def _comparison(world: World, rng: random.Random, hops: int, p: WorldParams) -> dict[str, Any]:
    budget = hops - 2  # relations on the two paths together
    t, attr, template, sign = rng.choice([c for c in COMPARISONS if budget == 0 or IN_RELATIONS[c[0]]])
    lo, n = world.offsets[t], world.counts[t]
    e1, e2 = lo + rng.randrange(n), lo + rng.randrange(n)
    v1, v2 = world.records[e1][attr], world.records[e2][attr]
    if isinstance(v1, date):  # compare dates, but a reader should see the order from the years
        if v1.year == v2.year:
            raise Conflict(f"tie: both {t}s have their {attr} date in the same year")
    elif e1 == e2 or abs(v1 - v2) < (1 if attr == "founded" else 0.1 * max(v1, v2)):
        raise Conflict(f"tie: the two {t}s' {attr} values are too close to compare")
    k1 = rng.randint(0, budget)
    sides = [_backward(world, rng, e1, k1), _backward(world, rng, e2, budget - k1)]
    if set(sides[0].entities(world)) & set(sides[1].entities(world)):
        raise Conflict("the two paths share an entity")
    for side in sides:
        _make_unique(world, rng, side, p.max_constraints, exclude=attr if not side.path else None)
    winner = e1 if (v1 > v2) == (sign > 0) else e2
    question = template.format(a=sides[0].phrase(world), b=sides[1].phrase(world))
    return {"type": "comparison", "question": question, "answer": world.name(winner),
            "aliases": world.aliases[winner], "sides": sides, "ask": "name", "compare": [attr, sign],
            "answer_entity": winner}


def _backward(world: World, rng: random.Random, end: int, k: int, tries: int = 8) -> Side:
    """A path of ``k`` relations ending at ``end``: walk in-edges back from it to an anchor, preferring (``tries``
    draws per step) a source that itself has in-edges while steps remain."""
    cur, path, seen = end, [], {end}
    for step in range(k):
        options = [(r, world.inverse[r][cur]) for r in IN_RELATIONS[world.types[cur]] if cur in world.inverse[r]]
        if not options:
            raise Conflict(f"dead end: no relation leads to a {world.types[cur]} on the way back")
        for _ in range(tries):
            r, sources = rng.choice(options)
            src = int(sources[rng.randrange(len(sources))])
            if src not in seen and (step == k - 1 or _has_in_edges(world, src)):
                break
        else:
            raise Conflict(f"dead end: no unvisited {world.types[cur]} source with a way further back")
        path.insert(0, r)
        seen.add(src)
        cur = src
    return Side(cur, path)


def _has_in_edges(world: World, e: int) -> bool:
    return any(e in world.inverse[r] for r in IN_RELATIONS[world.types[e]])


def synthesize(world: World, docs: Sequence[str], p: WorldParams, partition: str, index: int,
               asked: set[str]) -> tuple[dict[str, Any] | None, str]:
    """One verified question (or None and the last reason), retried up to ``max_retries`` times."""
    rng = random.Random(seed_for(p.seed, STAGE, partition, index))
    reason = "no attempt"
    # Kind and hops are drawn once per question, so retries keep the requested type mix and hop distribution.
    hops = rng.randint(p.min_hops, p.max_hops)
    make = _comparison if rng.random() < p.comparison_fraction else _bridge
    for _ in range(p.max_retries):
        try:
            q = make(world, rng, hops, p)
        except Conflict as why:
            reason = str(why)
            continue
        question = q["question"][0].upper() + q["question"][1:]
        if normalize(question) in asked:
            reason = "duplicate question"
            continue
        asked.add(normalize(question))
        support = [e for side in q["sides"] for e in side.entities(world)]
        chosen = _distractors(world, rng, q["sides"], set(support), p.n_distractors)
        documents = [{"title": world.name(e), "text": docs[e], "is_supporting": e in support} for e in
                     [*support, *chosen]]
        rng.shuffle(documents)
        program = {"kind": q["type"], "ask": q["ask"], "compare": q["compare"],
                   "answer_entity": f"E{q['answer_entity']}",
                   "sides": [{"anchor": f"E{s.anchor}", "anchor_type": world.types[s.anchor],
                              "constraints": [_readable(world.types[s.anchor], c) for c in s.constraints],
                              "path": s.path} for s in q["sides"]]}
        return {"id": f"world:{partition}:{index}", "source": "world", "question": question, "answer": q["answer"],
                "aliases": q["aliases"], "docs": json.dumps(documents, ensure_ascii=False), "hops": len(support),
                "type": q["type"], "split": eval_split(question, p.eval_fraction),
                "program": json.dumps(program)}, ""
    return None, f"{reason} (after {p.max_retries} attempts)"


def _readable(t: str, constraint: Constraint) -> list[Any]:
    """A constraint as the program records it: the category by name, a season as [year, season], a letter."""
    attr, op, v = constraint
    value: Any = {"is": lambda: CATEGORIES[t][v], "season": lambda: [v // 4, SEASONS[v % 4]],
                  "initial": lambda: chr(v)}.get(op, lambda: v)()
    return [attr, op, value]


def _distractors(world: World, rng: random.Random, sides: Sequence[Side], support: set[int], n: int) -> list[int]:
    """Related but non-supporting documents, like HotpotQA's distractor paragraphs: entities that share an
    anchor's first attribute (partial matches) and graph neighbours of the supporting entities."""
    if n == 0:
        return []
    pool: dict[int, None] = {}
    for side in sides:
        t = world.types[side.anchor]
        for attr, op, v in side.constraints[:1]:
            for e in world.index[(t, attr, op)].get(v, _EMPTY)[:8]:
                pool[int(e)] = None
    for e in sorted(support):
        for arr in world.rel.values():
            if arr[e] >= 0:
                pool[int(arr[e])] = None
    candidates = [e for e in pool if e not in support]
    return rng.sample(candidates, min(n, len(candidates)))


# --------------------------------------------------------------------------- frames and the stage

RELATION_COLUMNS = tuple(RELATIONS)
ENTITY_COLUMNS: dict[str, pl.DataType] = {
    "entity_id": pl.String(), "type": pl.String(), "name": pl.String(), "aliases": pl.List(pl.String()),
    "category": pl.String(), "born": pl.Date(), "founded": pl.Int64(), "released": pl.Date(), "held": pl.Date(),
    "population": pl.Int64(), "employees": pl.Int64(), "budget": pl.Int64(), "attendance": pl.Int64(),
    **{r: pl.String() for r in RELATION_COLUMNS},
}
DOCUMENT_COLUMNS: dict[str, pl.DataType] = {"doc_id": pl.String(), "title": pl.String(), "text": pl.String(),
                                            "entity_id": pl.String()}
RELATION_EDGE_COLUMNS: dict[str, pl.DataType] = {"subject": pl.String(), "relation": pl.String(),
                                                 "object": pl.String()}
WORLD_SEED_COLUMNS: dict[str, pl.DataType] = {**QA_SEED_COLUMNS, "program": pl.String()}

ENTITIES_CONTRACT = extend(record_contract(ENTITY_COLUMNS, key="entity_id", required=("name", "type")),
                           expectations=(unique("name"), in_set("type", TYPE_NOUN)), min_rows=1)
DOCUMENTS_CONTRACT = extend(record_contract(DOCUMENT_COLUMNS, key="doc_id", required=("title", "text")),
                            expectations=(Expect("ExpectColumnValueLengthsToBeBetween", column="text", min_value=20),),
                            min_rows=1)
RELATIONS_CONTRACT = Contract(columns=RELATION_EDGE_COLUMNS,
                              expectations=(in_set("relation", RELATIONS), *not_null("subject", "object")))
WORLD_SEEDS_CONTRACT = extend(qa_seed_contract("critical", hops=(2, 4)), columns={"program": pl.String()})


def entity_frame(world: World) -> pl.DataFrame:
    rows = []
    for i, rec in enumerate(world.records):
        row = {"entity_id": f"E{i}", "type": rec["type"], "name": rec["name"], "aliases": world.aliases[i],
               "category": world.kind(i)}
        row.update({a: rec.get(a) for a in (*DATES, *NUMERIC)})
        row.update({r: f"E{world.rel[r][i]}" if world.rel[r][i] >= 0 else None for r in RELATION_COLUMNS})
        rows.append(row)
    return pl.DataFrame(rows, schema=ENTITY_COLUMNS, orient="row")


def relation_frame(world: World) -> pl.DataFrame:
    parts = []
    for r, arr in world.rel.items():
        subjects = np.flatnonzero(arr >= 0)
        parts.append(pl.DataFrame({"subject": [f"E{s}" for s in subjects], "relation": [r] * len(subjects),
                                   "object": [f"E{o}" for o in arr[subjects]]}, schema=RELATION_EDGE_COLUMNS))
    return pl.concat(parts)


@lru_cache(maxsize=1)
def build_world(seed: int, n_entities: int) -> tuple[World, tuple[str, ...]]:
    """The graph and its rendered documents; depends on (seed, n_entities) only, never on the partition, so a
    worker running several partitions builds it once (the last one is kept; nothing mutates it)."""
    world = World(seed, n_entities)
    return world, tuple(render_document(world, i) for i in range(world.n))


def generate_seeds(world: World, docs: Sequence[str], p: WorldParams, partition: str) -> tuple[list, list]:
    seeds, rejected, asked = [], [], set()
    for index in range(p.n_questions):
        row, reason = synthesize(world, docs, p, partition, index, asked)
        if row is None:
            rejected.append({"id": f"world:{partition}:{index}", "source": "world", "reason": reason})
        else:
            seeds.append(row)
    return seeds, rejected


@stage(
    name=STAGE,
    version="1",
    params=WorldParams,
    outputs={"entities": ENTITIES_CONTRACT, "documents": DOCUMENTS_CONTRACT, "relations": RELATIONS_CONTRACT,
             "seeds": WORLD_SEEDS_CONTRACT, REJECTED: REJECTED_CONTRACT},
)
def world_stage(inputs: Mapping[str, Any], params: WorldParams, partition: str) -> dict[str, pl.DataFrame]:
    """A Faker knowledge graph, one document per entity, and 2-4 hop bridge/comparison questions whose answer is
    verified unique over the whole graph."""
    world, docs = build_world(params.seed, params.n_entities)
    seeds, rejected = generate_seeds(world, docs, params, partition)
    ids = [f"E{i}" for i in range(world.n)]
    return {
        "entities": entity_frame(world),
        "documents": pl.DataFrame({"doc_id": ids, "title": [r["name"] for r in world.records], "text": docs,
                                   "entity_id": ids}, schema=DOCUMENT_COLUMNS),
        "relations": relation_frame(world),
        "seeds": pl.DataFrame(seeds, schema=WORLD_SEED_COLUMNS, orient="row") if seeds
        else pl.DataFrame(schema=WORLD_SEED_COLUMNS),
        REJECTED: rejected_frame(rejected),
    }

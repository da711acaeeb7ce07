"""The world's knowledge graph: entity types, functional relations, the Faker-generated entities and the indexed
attribute buckets the uniqueness check intersects (a few microseconds per candidate)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from data_contracts.stage import seed_for
from envgen.rewards import normalize

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
# A work kind: (how its creator made it, how a question asks for the creator, how a phrase names the creator).
# Every kind is something a company releases (published_by).
WORK_CREATION = {
    "novel": ("written by", "Who wrote {x}?", "the author of {x}"),
    "film": ("directed by", "Who directed {x}?", "the director of {x}"),
    "album": ("recorded by", "Which artist recorded {x}?", "the artist who recorded {x}"),
    "video game": ("designed by", "Who designed {x}?", "the designer of {x}"),
    "documentary": ("directed by", "Who directed {x}?", "the director of {x}"),
    "poetry collection": ("written by", "Which poet wrote {x}?", "the poet who wrote {x}"),
    "television series": ("created by", "Who created {x}?", "the creator of {x}"),
    "graphic novel": ("drawn by", "Who drew {x}?", "the artist who drew {x}"),
}
WORK_KINDS = tuple(WORK_CREATION)
EVENT_KINDS = ("festival", "conference", "marathon", "exhibition", "summit", "tournament", "regatta", "trade fair",
               "symposium", "carnival", "concert", "championship")
CATEGORIES = {"person": OCCUPATIONS, "organization": INDUSTRIES, "work": WORK_KINDS, "event": EVENT_KINDS}
# Where a country has a common short form, answers accept it (the LoongRL verifier must not fail "USA").
COUNTRY_ALIASES = {
    "United States": ["United States of America", "USA", "US", "America"],
    "United Kingdom": ["UK", "Britain", "Great Britain"],
    "Russian Federation": ["Russia"],
    "South Korea": ["Korea", "Republic of Korea"],
    "Netherlands": ["Holland", "The Netherlands"],
    "Czechia": ["Czech Republic"],
    "Myanmar": ["Burma"],
    "Türkiye": ["Turkey"],
    "Brunei Darussalam": ["Brunei"],
    "Cabo Verde": ["Cape Verde"],
    "Côte d'Ivoire": ["Ivory Coast"],
    "Timor-Leste": ["East Timor"],
}
# Countries come from ISO 3166-1 (pycountry): a world of a few countries answers every "In which country" question
# with one of them, a prior a model learns instead of reading. At least this many from 300 entities on.
MIN_COUNTRIES = 50
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
        kind: (ask, phrase) for kind, (_, ask, phrase) in WORK_CREATION.items()}),
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
        countries = country_names()
        counts = {"country": min(len(countries), max(MIN_COUNTRIES, n_entities // 40), n_entities // 6)}
        rest = n_entities - counts["country"]
        for t, share in TYPE_SHARE:
            counts[t] = int(rest * share)
        counts["event"] += n_entities - sum(counts.values())
        self.types: list[str] = [t for t in ("country", *(t for t, _ in TYPE_SHARE)) for _ in range(counts[t])]
        self.offsets = {t: self.types.index(t) for t in counts}
        self.counts = counts
        self._countries = list(countries)
        random.Random(seed_for(seed, STAGE, "countries", 0)).shuffle(self._countries)
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
        if t == "country":  # without replacement: the i-th country of a seeded shuffle of the ISO list
            rec["name"] = self._unique_name(lambda: self._countries[i - self.offsets["country"]], rng)
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
        lists = [self.index[(t, a, o)].get(v, EMPTY) for a, o, v in constraints]
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


EMPTY = np.zeros(0, dtype=np.int64)


def _group(values: np.ndarray) -> dict[int, np.ndarray]:
    """value -> sorted indices holding it (values < 0 mean "none")."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    keys, starts = np.unique(sorted_values, return_index=True)
    bounds = [*starts[1:], len(values)]
    return {int(k): order[s:e] for k, s, e in zip(keys, starts, bounds, strict=True) if k >= 0}


@lru_cache(maxsize=1)
def country_names() -> tuple[str, ...]:
    """ISO 3166-1 countries that have ISO 3166-2 subdivisions (that leaves out dependent territories such as Guam
    or Bouvet Island), by common name, without commas, brackets or "and" (they would read as lists of candidates)."""
    import pycountry

    with_subdivisions = {s.country_code for s in pycountry.subdivisions}
    names = (getattr(c, "common_name", c.name) for c in pycountry.countries if c.alpha_2 in with_subdivisions)
    return tuple(sorted(n for n in names if len(n.split()) <= 3 and not any(c in n for c in ",()")
                        and " and " not in n))


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


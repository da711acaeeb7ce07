"""The world knowledge graph as the reference teacher reads it: the ``world`` stage's ``entities`` and
``relations`` frames as a networkx multigraph, with entity names found in text on whole-token boundaries."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

import networkx as nx
import polars as pl

from envgen.rewards import normalize
from tasks.research.search.claims import SYMMETRIC, Claim

# How the reference teacher speaks of the world's relations: (the object seen from the subject, the subjects
# seen from the object). A relation missing here is spoken of by its name.
RELATION_LABELS: dict[str, tuple[str, str]] = {
    "located_in": ("country", "cities"),
    "born_in": ("birthplace", "people born there"),
    "works_for": ("employer", "employees"),
    "married_to": ("spouse", "spouse"),
    "founded_by": ("founder", "organisations founded"),
    "headquartered_in": ("headquarters", "organisations headquartered there"),
    "created_by": ("creator", "works created"),
    "published_by": ("publisher", "works released"),
    "organized_by": ("organiser", "events organised"),
    "held_in": ("host city", "events hosted"),
}


ATTRIBUTES = ("born", "founded", "released", "held", "population", "employees", "budget", "attendance")
"""The world's dated and numeric attributes, kept on the graph's nodes when the entities frame has them."""


def labels(relation: str) -> tuple[str, str]:
    plain = relation.replace("_", " ")
    return RELATION_LABELS.get(relation, (plain, f"what is {plain} it"))


@dataclass
class KnowledgeGraph:
    graph: nx.MultiDiGraph
    _first: dict[str, list[tuple[tuple[str, ...], str]]] = field(default_factory=dict)

    @classmethod
    def from_frames(cls, entities: pl.DataFrame, relations: pl.DataFrame) -> KnowledgeGraph:
        graph = nx.MultiDiGraph()
        present = [a for a in ATTRIBUTES if a in entities.columns]
        for row in entities.select("entity_id", "name", "type", "category", *present).iter_rows(named=True):
            graph.add_node(row["entity_id"], name=row["name"], type=row["type"], category=row["category"],
                           attributes={a: row[a] for a in present if row[a] is not None})
        for subject, relation, obj in relations.select("subject", "relation", "object").iter_rows():
            if subject in graph and obj in graph:
                graph.add_edge(subject, obj, key=relation)
        kg = cls(graph)
        for node, name in graph.nodes(data="name"):
            toks = tuple(normalize(name).split())
            if toks:
                kg._first.setdefault(toks[0], []).append((toks, node))
        for options in kg._first.values():
            options.sort(key=lambda o: (-len(o[0]), o[1]))  # longest name first: "Port Barbara" over "Port"
        return kg

    @classmethod
    def empty(cls) -> KnowledgeGraph:
        return cls(nx.MultiDiGraph())

    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    def name(self, node: str) -> str:
        return self.graph.nodes[node]["name"]

    def type(self, node: str) -> str:
        return self.graph.nodes[node]["type"]

    def category(self, node: str) -> str | None:
        return self.graph.nodes[node]["category"]

    def attributes(self, node: str) -> dict[str, object]:
        """The node's dated and numeric attributes (dates as ``datetime.date``)."""
        return dict(self.graph.nodes[node]["attributes"])

    def of_type(self, type_: str) -> list[str]:
        return sorted((n for n, t in self.graph.nodes(data="type") if t == type_), key=_natural)

    def find(self, text: str) -> list[str]:
        """Entities named in ``text`` (whole tokens, longest name first), in order of first mention."""
        toks = normalize(text).split()
        found: dict[str, None] = {}
        i = 0
        while i < len(toks):
            for name, node in self._first.get(toks[i], ()):
                if tuple(toks[i:i + len(name)]) == name:
                    found.setdefault(node)
                    i += len(name) - 1
                    break
            i += 1
        return list(found)

    def out_edges(self, node: str) -> list[tuple[str, str]]:
        """(relation, object) of every edge from ``node``, in a stable order."""
        return sorted((k, v) for _, v, k in self.graph.out_edges(node, keys=True))

    def in_edges(self, node: str) -> list[tuple[str, str]]:
        """(relation, subject) of every edge into ``node``, in a stable order."""
        return sorted((k, u) for u, _, k in self.graph.in_edges(node, keys=True))

    def neighbours(self, node: str) -> set[str]:
        return set(self.graph.successors(node)) | set(self.graph.predecessors(node))

    def names(self, nodes: Iterable[str]) -> list[str]:
        return [self.name(n) for n in nodes]


def _natural(node: str) -> tuple[int, str]:
    """E2 before E10."""
    digits = "".join(ch for ch in node if ch.isdigit())
    return (int(digits) if digits else -1, node)


# --- facts of an entity, as documents state them and as questions and rubrics phrase them ---------------------

OUT_PHRASES = {"located_in": "located in {}", "born_in": "born in {}", "works_for": "employed by {}",
                "married_to": "married to {}", "founded_by": "founded by {}", "headquartered_in": "headquartered in {}",
                "created_by": "created by {}", "published_by": "released by {}", "organized_by": "organised by {}",
                "held_in": "held in {}"}
IN_PHRASES = {"located_in": "where {} lies", "born_in": "where {} was born", "works_for": "that employs {}",
               "married_to": "married to {}", "founded_by": "who founded {}",
               "headquartered_in": "where {} is headquartered", "created_by": "who created {}",
               "published_by": "that released {}", "organized_by": "that organised the {}",
               "held_in": "that hosted the {}"}
_STATEMENTS = {"located_in": "{s} lies in {o}", "born_in": "{s} was born in {o}", "works_for": "{s} works for {o}",
               "married_to": "{s} is married to {o}", "founded_by": "{s} was founded by {o}",
               "headquartered_in": "{s} is headquartered in {o}", "created_by": "{s} was created by {o}",
               "published_by": "{s} was released by {o}", "organized_by": "the {s} was organised by {o}",
               "held_in": "the {s} was held in {o}"}
_ATTRIBUTE_TEXT = {  # attribute -> (statement, question phrase); {v} is the value as documents write it
    "born": ("{x} was born on {v}", "born in {y}"), "founded": ("{x} was founded in {v}", "founded in {y}"),
    "released": ("{x} was released on {v}", "released in {y}"), "held": ("{x} was held on {v}", "held in {y}"),
    "population": ("{x} has a population of {v}", "with a population of {v}"),
    "employees": ("{x} employs {v} people", "with {v} employees"),
    "budget": ("{x} has an annual budget of ${v}", "with an annual budget of ${v}"),
    "attendance": ("{x} was attended by {v} people", "attended by {v} people"),
}


@dataclass(frozen=True)
class Fact:
    """One fact of an entity: ``answer`` is the value as its documents write it (a name, "July 20, 1865",
    "79,116"), ``phrase`` describes the entity by it without naming the entity (a question's constraint)."""

    subject: str
    kind: str
    """relation | inverse | attribute | category"""
    key: str
    """the relation, the attribute, or "category"."""
    value: str
    """the other entity's id, or the attribute's value as text."""
    answer: str
    statement: str
    phrase: str
    year: int | None = None


def fmt_value(value: object) -> str:
    """A value as the world's documents write it: "July 20, 1865", "79,116"."""
    if isinstance(value, date):
        return f"{value:%B} {value.day}, {value.year}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def facts(kg: KnowledgeGraph, node: str) -> list[Fact]:
    """Every fact of ``node``: its relations both ways, its dated and numeric attributes, its category."""
    x = kg.name(node)
    out: list[Fact] = []
    for rel, obj in kg.out_edges(node):
        y = kg.name(obj)
        out.append(Fact(node, "relation", rel, obj, y, _statement(rel, x, y),
                        OUT_PHRASES.get(rel, rel.replace("_", " ") + " {}").format(y)))
    for rel, subject in kg.in_edges(node):
        s = kg.name(subject)
        out.append(Fact(node, "inverse", rel, subject, s, _statement(rel, s, x),
                        IN_PHRASES.get(rel, "linked to {}").format(s)))
    for attr, value in sorted(kg.attributes(node).items()):
        statement, phrase = _ATTRIBUTE_TEXT.get(attr, ("the {a} of {x} is {v}", "whose {a} is {v}"))
        year = value.year if isinstance(value, date) else (value if attr == "founded" else None)
        v = _attribute_text(attr, value)
        out.append(Fact(node, "attribute", attr, v, v, statement.format(x=x, v=v, a=attr),
                        phrase.format(v=v, y=year, a=attr), year if isinstance(year, int) else None))
    category = kg.category(node)
    if category:
        noun = f"an {category}" if category[0] in "aeiou" else f"a {category}"
        out.append(Fact(node, "category", "category", category, category, f"{x} is {noun}",
                        f"in the {category} industry" if kg.type(node) == "organization" else noun))
    return out


def _statement(relation: str, subject: str, obj: str) -> str:
    return _STATEMENTS.get(relation, "{s} is " + relation.replace("_", " ") + " {o}").format(s=subject, o=obj)


def holds(kg: KnowledgeGraph, node: str, fact: Fact) -> bool:
    """Whether ``node`` satisfies ``fact``'s constraint as its phrase states it (a year for dates)."""
    if kg.type(node) != kg.type(fact.subject):
        return False
    if fact.kind == "relation":
        return (fact.key, fact.value) in kg.out_edges(node)
    if fact.kind == "inverse":
        return (fact.key, fact.value) in kg.in_edges(node)
    if fact.kind == "category":
        return kg.category(node) == fact.value
    value = kg.attributes(node).get(fact.key)
    if value is None:
        return False
    if fact.year is not None and isinstance(value, date):
        return value.year == fact.year
    return _attribute_text(fact.key, value) == fact.value


def _attribute_text(attribute: str, value: object) -> str:
    return str(value) if attribute == "founded" else fmt_value(value)  # a year has no thousands separator


# --- claims checked against the graph (tasks.research.search.support.Facts) -------------------------------------------

_CATEGORY_CLAIM = re.compile(r"\b(?:is|was|as) (?:an?|the) ([a-z]+)\b")


@dataclass
class WorldFacts:
    """The graph as the citation check's ``Facts``: a claim's relations, values and categories held against the
    world's own (every document of the world corpus is written from them)."""

    kg: KnowledgeGraph
    _node: dict[str, str] = field(default_factory=dict)
    _categories: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node, name in self.kg.graph.nodes(data="name"):
            self._node[name.lower()] = node
            category = self.kg.category(node)
            if category:
                self._categories.setdefault(self.kg.type(node), set()).add(category)

    def names(self) -> list[str]:
        return [name for _, name in self.kg.graph.nodes(data="name")]

    def contradiction(self, claim: Claim) -> str | None:
        for t in claim.triples:
            s, o = self._node.get(t.subject.lower()), self._node.get(t.object.lower())
            if s is None or o is None:
                continue
            edges = self.kg.out_edges(s)
            if (t.relation, o) in edges or (t.relation in SYMMETRIC and (t.relation, s) in self.kg.out_edges(o)):
                continue
            actual = [self.kg.name(v) for r, v in edges if r == t.relation]
            label = labels(t.relation)[0]
            return (f"the world's {label} of {t.subject} is {actual[0]}, not {t.object}" if actual else
                    f"the world holds no fact that {t}")
        nodes = [n for m in claim.mentions if (n := self._node.get(m.name.lower())) is not None]
        for q in claim.quantities:
            if q.derived or q.attribute is None:
                continue
            values = [self.kg.attributes(n)[q.attribute] for n in nodes if q.attribute in self.kg.attributes(n)]
            if values and not any(_same_value(q.value, v) for v in values):
                return f"the world's {q.attribute} of {claim.subject} is {fmt_value(values[0])}, not {q.value}"
        subject = self._node.get(claim.subject.lower()) if claim.subject else None
        if subject is not None and (said := _CATEGORY_CLAIM.search(claim.text)):
            word, actual = said.group(1), self.kg.category(subject)
            if actual and word != actual and word in self._categories.get(self.kg.type(subject), set()):
                return f"the world has {claim.subject} as {actual}, not {word}"
        return None


def _same_value(claimed: str, value: object) -> bool:
    if isinstance(value, date):
        return claimed in (value.isoformat(), str(value.year))
    return claimed == str(value)

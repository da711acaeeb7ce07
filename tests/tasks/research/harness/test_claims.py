"""Fact-level citation support on claims generated from the world's facts: every false-claim class is refused
(swapped figures, an inverted relation, the wrong relation between the right people, a negation, a figure of
another attribute), true statements and their paraphrases are supported, with the index's lexical check alone and
with the knowledge graph's facts."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from research_fixtures import index_dir, kg

from tasks.research.harness.citations import check_citations
from tasks.research.harness.knowledge import KnowledgeGraph, WorldFacts
from tasks.research.harness.roles import open_index
from tasks.research.search.claims import Gazetteer, extract, quantities


@lru_cache(maxsize=1)
def graph() -> KnowledgeGraph:
    return kg()


def edges(relation: str) -> list[tuple[str, str]]:
    g = graph()
    return [(u, v) for u, v, k in g.graph.edges(keys=True) if k == relation]


def verdicts(text: str, facts: bool = False) -> list[str]:
    report = check_citations(text, open_index(index_dir()), facts=WorldFacts(graph()) if facts else None)
    return [c.verdict for c in report.checks]


def organisations() -> list[str]:
    g = graph()
    return [n for n in g.of_type("organization")
            if g.attributes(n)["employees"] != g.attributes(n)["budget"]]


FACTS = st.booleans()


@settings(max_examples=30, deadline=None)
@given(st.data(), FACTS)
def test_swapped_figures_are_refused_and_the_true_ones_supported(data: st.DataObject, facts: bool) -> None:
    g = graph()
    org = data.draw(st.sampled_from(organisations()))
    name, a = g.name(org), g.attributes(org)
    staff, budget = a["employees"], a["budget"]
    assert verdicts(f"{name} employs {budget:,} people and its annual budget is ${staff:,} [cite:{org}].",
                    facts) == ["unsupported"]
    assert verdicts(f"{name} employs {staff:,} people and its annual budget is ${budget:,} [cite:{org}].",
                    facts) == ["supported"]
    paraphrase = data.draw(st.sampled_from([f"{name} has a workforce of {staff:,}",
                                            f"With {staff:,} employees, {name} spends ${budget:,} a year",
                                            f"The annual budget of {name} is ${budget:,}"]))
    assert verdicts(f"{paraphrase} [cite:{org}].", facts) == ["supported"]


@settings(max_examples=30, deadline=None)
@given(st.data(), FACTS)
def test_an_inverted_relation_is_refused(data: st.DataObject, facts: bool) -> None:
    g = graph()
    org, person = data.draw(st.sampled_from(edges("founded_by")))
    o, p = g.name(org), g.name(person)
    for doc in (org, person):
        assert verdicts(f"{o} founded {p} [cite:{doc}].", facts) == ["unsupported"]
        true = data.draw(st.sampled_from([f"{p} founded {o}", f"{o} was established by {p}",
                                          f"{o} was founded by {p}", f"{o}'s founder is {p}"]))
        assert verdicts(f"{true} [cite:{doc}].", facts) == ["supported"]


@settings(max_examples=30, deadline=None)
@given(st.data(), FACTS)
def test_the_wrong_relation_between_the_right_entities_is_refused(data: st.DataObject, facts: bool) -> None:
    g = graph()
    founded = set(edges("founded_by"))
    person, org = data.draw(st.sampled_from([(p, o) for p, o in edges("works_for") if (o, p) not in founded]))
    p, o = g.name(person), g.name(org)
    assert verdicts(f"{p} founded {o} [cite:{person}].", facts) == ["unsupported"]
    true = data.draw(st.sampled_from([f"{p} works for {o}", f"{p} has worked for {o}", f"{o} employs {p}",
                                      f"{p} is an employee of {o}", f"{p} is employed by {o}"]))
    assert verdicts(f"{true} [cite:{person}].", facts) == ["supported"]


@settings(max_examples=30, deadline=None)
@given(st.data(), FACTS)
def test_a_negation_the_source_lacks_is_refused(data: st.DataObject, facts: bool) -> None:
    g = graph()
    relation, template = data.draw(st.sampled_from([
        ("works_for", "{s} does not work for {o}"), ("born_in", "{s} was not born in {o}"),
        ("founded_by", "{s} was never founded by {o}"), ("held_in", "The {s} was not held in {o}")]))
    subject, obj = data.draw(st.sampled_from(edges(relation)))
    claim = template.format(s=g.name(subject), o=g.name(obj))
    assert verdicts(f"{claim} [cite:{subject}].", facts) == ["unsupported"]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_a_figure_moved_to_another_attribute_or_entity_is_refused(data: st.DataObject) -> None:
    g = graph()
    city = data.draw(st.sampled_from(g.of_type("city")))
    name, a = g.name(city), g.attributes(city)
    assert verdicts(f"{name} has a population of {a['population']:,} [cite:{city}].") == ["supported"]
    assert verdicts(f"{name} was founded in {a['population']:,} [cite:{city}].") == ["unsupported"]
    other = data.draw(st.sampled_from([c for c in g.of_type("city") if g.attributes(c)["population"]
                                       != a["population"]]))
    assert verdicts(f"{name} has a population of {g.attributes(other)['population']:,} [cite:{city}].") \
        == ["unsupported"]


def test_the_world_facts_refuse_what_a_document_does_not_contradict() -> None:
    # A person's occupation stated wrongly: the words alone cannot tell a plausible paraphrase from it, the graph can.
    g = graph()
    person = g.of_type("person")[0]
    wrong = next(c for c in ("chemist", "lawyer", "pilot") if c != g.category(person))
    facts = WorldFacts(g)
    claim = extract(f"{g.name(person)} is a {wrong}.", Gazetteer.of(facts.names()))
    assert facts.contradiction(claim) is not None
    right = extract(f"{g.name(person)} is a {g.category(person)}.", Gazetteer.of(facts.names()))
    assert facts.contradiction(right) is None


def test_a_derived_figure_must_follow_from_the_cited_figures() -> None:
    g = graph()
    a, b = g.of_type("organization")[:2]
    ya, yb = g.attributes(a)["founded"], g.attributes(b)["founded"]
    gap = abs(ya - yb)
    text = (f"{g.name(a)} was founded in {ya} [cite:{a}], {gap} years apart from {g.name(b)}, founded in {yb} "
            f"[cite:{b}].")
    assert verdicts(text) == ["supported", "supported"]
    assert verdicts(text.replace(f"{gap} years", f"{gap + 3} years")) == ["unsupported", "unsupported"]


def test_a_citation_that_states_none_of_a_sentence_is_unsupported_beside_one_that_does() -> None:
    g = graph()
    org, person = edges("founded_by")[0]
    unrelated = next(c for c in g.of_type("city") if c not in g.neighbours(org) and c not in g.neighbours(person))
    assert verdicts(f"{g.name(person)} founded {g.name(org)} [cite:{org}] [cite:{unrelated}].") \
        == ["supported", "unsupported"]


@pytest.mark.parametrize(("text", "expected"), [
    ("It employs 3,908,139 people and its annual budget is $79,116.", [("3908139", "employees"), ("79116", "budget")]),
    ("The company has 2,230 employees.", [("2230", "employees")]),
    ("It was founded by Sheena C. Hull in 1901.", [("1901", "founded")]),
    ("Amy H. Roy (born March 5, 1895) is a photographer.", [("1895-03-05", "born")]),
    ("As of the last census the city had a population of 3,401,738.", [("3401738", "population")]),
])
def test_numbers_are_bound_to_their_attribute(text: str, expected: list[tuple[str, str]]) -> None:
    assert [(q.value, q.attribute) for q in quantities(text)] == expected


TEMPLATES = {"employees": ["{x} employs {v} people", "{x} has {v} employees", "{x} has a workforce of {v}"],
             "budget": ["{x} has an annual budget of ${v}", "Its annual budget is ${v}"],
             "population": ["{x} has a population of {v}", "{x} is home to {v} people"],
             "attendance": ["It was attended by {v} people", "Attendance reached {v}"]}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(TEMPLATES)), st.sampled_from(sorted(TEMPLATES)), st.integers(100, 10**9),
       st.integers(100, 10**9), st.data())
def test_two_figures_in_one_sentence_keep_their_own_attributes(a: str, b: str, u: int, v: int,
                                                               data: st.DataObject) -> None:
    first = data.draw(st.sampled_from(TEMPLATES[a])).format(x="Wood Ltd", v=f"{u:,}")
    second = data.draw(st.sampled_from(TEMPLATES[b])).format(x="it", v=f"{v:,}")
    found = quantities(f"{first} and {second[0].lower()}{second[1:]}.")
    assert [(q.value, q.attribute) for q in found] == [(str(u), a), (str(v), b)]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_relation_keeps_its_direction_whichever_way_it_is_worded(data: st.DataObject) -> None:
    org, person = data.draw(st.sampled_from(edges("founded_by")))
    g = graph()
    o, p = g.name(org), g.name(person)
    gazetteer = Gazetteer.of([o, p])
    wording = data.draw(st.sampled_from([f"{p} founded {o}", f"{o} was founded by {p}", f"{o}'s founder is {p}",
                                         f"{o} is a company founded in 1901 by {p}", f"{p} is the founder of {o}"]))
    [triple] = extract(wording, gazetteer).triples
    assert (triple.subject, triple.relation, triple.object) == (o, "founded_by", p)

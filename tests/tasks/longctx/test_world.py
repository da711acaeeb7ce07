"""The synthetic world: determinism, hop range, answers in supporting documents, obfuscation, and answer uniqueness
re-checked by an independent brute-force solver over the graph (networkx, raw attribute values)."""

from __future__ import annotations

import json
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import networkx as nx
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_contracts.gate import validate
from data_contracts.stage import StageError
from envgen.rewards import normalize
from tasks.longctx.qa_seeds import (
    MAX_ANSWER_SHARE,
    answer_cap,
    answer_in_support,
    over_share,
    parse_docs,
    share_cap,
)
from tasks.longctx.world import build_world
from tasks.longctx.world import world as world_stage
from tasks.longctx.world.graph import CATEGORIES, MIN_COUNTRIES, country_names

PARAMS = {"seed": 7, "n_entities": 900, "n_questions": 160, "n_distractors": 2}


@pytest.fixture(scope="module")
def out() -> dict[str, pl.DataFrame]:
    return world_stage.run({}, world_stage.parse_params(PARAMS), "p0")


def test_same_params_give_identical_frames(out) -> None:
    build_world.cache_clear()  # rebuild the graph too, not only the questions
    again = world_stage.run({}, world_stage.parse_params(PARAMS), "p0")
    assert out.keys() == again.keys()
    for name in out:
        assert out[name].equals(again[name]), name


def test_partitions_share_the_graph_but_not_the_questions(out) -> None:
    other = world_stage.run({}, world_stage.parse_params({**PARAMS, "n_questions": 20}), "p1")
    assert other["entities"].equals(out["entities"]) and other["documents"].equals(out["documents"])
    assert not set(other["seeds"]["id"]) & set(out["seeds"]["id"])


def test_outputs_pass_their_contracts(out) -> None:
    assert out["seeds"].height >= 0.9 * PARAMS["n_questions"]
    for name, frame in out.items():
        report = validate("world", name, frame, world_stage.outputs[name], "p0")
        assert report.passed, report.summary()


def test_hops_types_and_supporting_docs(out) -> None:
    seeds = out["seeds"]
    assert set(seeds["hops"]) <= {2, 3, 4} and len(set(seeds["hops"])) == 3
    assert set(seeds["type"]) == {"bridge", "comparison"}
    for row in seeds.iter_rows(named=True):
        docs = parse_docs(row["docs"])
        assert sum(d["is_supporting"] for d in docs) == row["hops"]
        assert len(docs) - row["hops"] <= PARAMS["n_distractors"]
        assert answer_in_support(row["answer"], row["aliases"], row["docs"]), row["question"]


def test_questions_never_name_the_entities_on_their_path(out) -> None:
    for row in out["seeds"].iter_rows(named=True):
        for doc in parse_docs(row["docs"]):
            if doc["is_supporting"]:
                assert doc["title"] not in row["question"], (doc["title"], row["question"])


# --------------------------------------------------------------------------- the independent solver

SEASON = {12: "winter", 1: "winter", 2: "winter", 3: "spring", 4: "spring", 5: "spring", 6: "summer", 7: "summer",
          8: "summer", 9: "autumn", 10: "autumn", 11: "autumn"}


def _two_significant(x: int) -> int:
    exponent = max(len(str(x)) - 2, 0)
    return int(Decimal(x).scaleb(-exponent).quantize(Decimal(1), rounding=ROUND_HALF_UP).scaleb(exponent))


def _holds(entity: dict[str, Any], attr: str, op: str, value: Any) -> bool:
    if op == "is":
        return entity["category"] == value
    if op == "initial":
        words = [w for w in entity["name"].split() if w[0].isalpha() and not w.endswith(".")]
        return (words[-1] if entity["type"] == "person" else words[0])[0].upper() == value
    raw = entity[attr]
    if raw is None:
        return False
    if op == "season":
        return [raw.year, SEASON[raw.month]] == value
    if op == "decade":
        year = raw.year if isinstance(raw, date) else raw
        return year - year % 10 == value
    return _two_significant(raw) == value  # "about"


class BruteForce:
    """Evaluates a question program over every entity, with networkx for the relation paths."""

    def __init__(self, entities: pl.DataFrame, relations: pl.DataFrame) -> None:
        self.entities = {row["entity_id"]: row for row in entities.iter_rows(named=True)}
        self.graph = nx.MultiDiGraph()
        self.graph.add_edges_from((s, o, {"relation": r}) for s, r, o in relations.iter_rows())

    def ends(self, side: dict[str, Any]) -> set[str]:
        current = {e for e, row in self.entities.items()
                   if row["type"] == side["anchor_type"] and all(_holds(row, *c) for c in side["constraints"])}
        for relation in side["path"]:
            current = {o for e in current if e in self.graph
                       for _, o, d in self.graph.out_edges(e, data=True) if d["relation"] == relation}
        return current

    def answers(self, program: dict[str, Any]) -> set[str]:
        sides = [self.ends(s) for s in program["sides"]]
        if program["kind"] == "bridge":
            if program["ask"] == "name":
                return {self.entities[e]["name"] for e in sides[0]}
            values = {self.entities[e][program["ask"]] for e in sides[0]}
            return {str(v.year if isinstance(v, date) else v) for v in values}
        attr, sign = program["compare"]
        if any(len(s) != 1 for s in sides):
            return set().union(*({self.entities[e]["name"] for e in s} for s in sides))
        (a,), (b,) = sides
        va, vb = self.entities[a][attr], self.entities[b][attr]
        return {self.entities[a if (va > vb) == (sign > 0) else b]["name"]}


def test_every_answer_is_unique_over_the_whole_graph(out) -> None:
    solver = BruteForce(out["entities"], out["relations"])
    for row in out["seeds"].iter_rows(named=True):
        program = json.loads(row["program"])
        assert solver.answers(program) == {row["answer"]}, row["question"]
        if program["kind"] == "comparison":
            assert all(len(solver.ends(s)) == 1 for s in program["sides"]), row["question"]


def test_impossible_uniqueness_is_rejected_with_a_reason() -> None:
    params = world_stage.parse_params({**PARAMS, "n_questions": 60, "max_constraints": 1, "max_retries": 1})
    out = world_stage.run({}, params, "p0")
    assert out["rejected"].height > 0
    assert out["rejected"]["reason"].str.contains("not unique|dead end|tie|no relation|share|revisits").all()
    solver = BruteForce(out["entities"], out["relations"])
    for row in out["seeds"].iter_rows(named=True):
        assert solver.answers(json.loads(row["program"])) == {row["answer"]}


@pytest.mark.parametrize(("override", "message"), [
    ({"min_hops": 4, "max_hops": 3}, "must not exceed max_hops"),
    ({"max_hops": 5}, "less than or equal to 4"),
    ({"n_entities": 10}, "greater than or equal to 60"),
])
def test_bad_params(override: dict[str, int], message: str) -> None:
    with pytest.raises(StageError, match=message):
        world_stage.parse_params({**PARAMS, **override})


def test_aliases_drop_middle_initials_and_never_name_another_entity(out) -> None:
    entities = out["entities"]
    names = set(entities["name"])
    normalized = {normalize(n) for n in names}
    people = entities.filter((pl.col("type") == "person") & pl.col("name").str.contains(r" [A-Z]\. "))
    assert people.height > 0
    for name, aliases in people.select("name", "aliases").iter_rows():
        first, _, last = name.split()
        assert aliases == [f"{first} {last}"] or normalize(f"{first} {last}") in normalized
    assert not normalized & {normalize(a) for row in entities["aliases"] for a in row}


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31), hops=st.tuples(st.integers(2, 4), st.integers(2, 4)).map(sorted),
       comparison=st.sampled_from([0.0, 0.5, 1.0]))
def test_any_small_world_keeps_only_verified_questions(seed: int, hops: list[int], comparison: float) -> None:
    params = {"seed": seed, "n_entities": 200, "n_questions": 25, "min_hops": hops[0], "max_hops": hops[1],
              "comparison_fraction": comparison, "n_distractors": 1}
    out = world_stage.run({}, world_stage.parse_params(params), "p0")
    assert out["seeds"].height + out["rejected"].height == 25
    solver = BruteForce(out["entities"], out["relations"])
    for row in out["seeds"].iter_rows(named=True):
        assert hops[0] <= row["hops"] <= hops[1]
        assert solver.answers(json.loads(row["program"])) == {row["answer"]}, row["question"]
        assert answer_in_support(row["answer"], row["aliases"], row["docs"])


# --------------------------------------------------------------------------- the answer prior


def test_countries_come_from_a_real_list_and_no_answer_holds_more_than_its_share(out) -> None:
    countries = out["entities"].filter(pl.col("type") == "country")["name"]
    assert countries.len() >= MIN_COUNTRIES and set(countries) <= set(country_names())
    assert {"Guam", "Netherlands Antilles", "Antarctica"}.isdisjoint(country_names())  # no territories
    answers = out["seeds"]["answer"].map_elements(normalize, return_dtype=pl.String).value_counts()
    assert answers["count"].max() <= MAX_ANSWER_SHARE * out["seeds"].height
    in_country = out["seeds"].filter(pl.col("question").str.starts_with("In which country"))
    assert in_country["answer"].n_unique() >= 0.5 * in_country.height


def test_every_category_draws_from_a_realistic_number_of_values(out) -> None:
    used = out["entities"].drop_nulls("category").group_by("type").agg(pl.col("category").n_unique())
    assert dict(used.iter_rows()) == {
        "person": len(CATEGORIES["person"]), "organization": len(CATEGORIES["organization"]),
        "work": len(CATEGORIES["work"]), "event": len(CATEGORIES["event"])}
    assert min(len(values) for values in CATEGORIES.values()) >= 8


def test_a_prior_in_the_seeds_is_quarantined(out) -> None:
    seeds = out["seeds"]
    prior = seeds.with_columns(pl.when(pl.int_range(pl.len()) % 5 == 0).then(pl.lit("Niue"))
                               .otherwise(pl.col("answer")).alias("answer"))
    report = validate("world", "seeds", prior, world_stage.outputs["seeds"], "p0")
    assert not report.passed and any(f.startswith("answer_share") for f in report.summary()["failed"])


@given(counts=st.lists(st.integers(1, 60), min_size=1, max_size=60), most=st.none() | st.integers(1, 10))
def test_cutting_to_the_share_cap_leaves_no_answer_over_its_share(counts: list[int], most: int | None) -> None:
    cap = share_cap(counts, most)
    assert most is None or cap <= most
    cut = [min(n, cap) for n in counts]
    frame = pl.DataFrame({"answer": [f"a{i}" for i, n in enumerate(cut) for _ in range(n)]})
    assert not any(over_share(frame))
    # the largest such cap: one more row per answer would break the share (unless nothing was cut)
    if cap < max(counts) and (most is None or cap < most):
        assert max(counts) > answer_cap(sum(min(n, cap + 1) for n in counts)) or cap + 1 > max(counts)

"""ResearchSpec: the validators find and name every kind of error in hypothesis-generated broken specs; structural
errors are repaired by renumbering, others by the planner or by reverting to the last valid candidate, and with
nothing valid dispatch stops with every problem named."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.research.harness.research_spec import (
    PROBLEM_KINDS,
    ResearchSpec,
    ResearchSpecError,
    parse_research_spec,
    renumber,
    resolve,
    spec_from_data,
    validate_spec,
)

words = st.text(alphabet="abcdefghij ", min_size=3, max_size=12).map(lambda s: s.strip() or "topic")


@st.composite
def valid_specs(draw: Any) -> dict[str, Any]:
    """A valid spec: a tree of up to 3 levels, listed parents first, numbered 1..n among siblings."""
    sections: list[dict[str, Any]] = []

    def add(parent: str | None, depth: int) -> None:
        n = draw(st.integers(1, 3 if depth < 2 else 2))
        for order in range(1, n + 1):
            sid = f"S{order}" if parent is None else f"{parent}.{order}"
            section = {"id": sid, "parent": parent, "order": order, "title": draw(words), "scope": draw(words),
                       "research_questions": [draw(words) + "?"], "required_entities": [draw(words)],
                       "source_leads": []}
            sections.append(section)
            if depth < 2 and draw(st.booleans()):
                add(sid, depth + 1)

    add(None, 0)
    return {"query": "q", "title": draw(words), "boundaries": [], "sections": sections}


def break_spec(data: dict[str, Any], kind: str, i: int) -> tuple[dict[str, Any], str | None]:
    """The spec with one error of ``kind`` planted at section ``i`` (modulo the count); the section it names."""
    sections = data["sections"]
    s = sections[i % len(sections)]
    leaves = [x for x in sections if x["id"] not in {y["parent"] for y in sections}]
    if kind == "duplicate_id":
        other = sections[(i + 1) % len(sections)] if len(sections) > 1 else None
        if other is None:
            sections.append(dict(s))
        else:
            other["id"] = s["id"]
        return data, s["id"]
    if kind == "missing_parent":
        s["parent"] = "S99"
        return data, s["id"]
    if kind == "parent_mismatch":  # the parent exists but is not the id's prefix
        expected = s["id"].rsplit(".", 1)[0] if "." in s["id"] else None
        others = [x["id"] for x in sections if x["id"] not in (s["id"], expected)]
        s["parent"] = others[i % len(others)] if others else "S99"
        return data, s["id"]
    if kind == "ordering":
        s["order"] += 5
        return data, None
    if kind == "bad_id":
        s["id"] = f"Section-{i}"
        return data, s["id"]
    if kind == "missing_field":
        leaf = leaves[i % len(leaves)]
        leaf[["scope", "research_questions", "title"][i % 3]] = [] if i % 3 == 1 else ""
        return data, leaf["id"]
    if kind == "no_sections":
        data["sections"] = []
        return data, None
    raise AssertionError(kind)


STRUCTURE_KINDS = ("duplicate_id", "missing_parent", "parent_mismatch", "ordering", "bad_id")


@settings(max_examples=60, deadline=None)
@given(valid_specs())
def test_generated_valid_specs_pass_and_renumbering_keeps_them(data: dict[str, Any]) -> None:
    spec, problems = spec_from_data(data)
    assert spec is not None and problems == []
    assert renumber(spec) == spec


@settings(max_examples=200, deadline=None)
@given(valid_specs(), st.sampled_from([*STRUCTURE_KINDS, "missing_field", "no_sections"]), st.integers(0, 50))
def test_every_kind_of_error_is_found_and_named(data: dict[str, Any], kind: str, i: int) -> None:
    broken, where = break_spec(json.loads(json.dumps(data)), kind, i)
    spec, problems = spec_from_data(broken)
    assert spec is not None
    kinds = {p.kind for p in problems}
    # where no section but the id's own prefix could be its parent (one section, or a parent and its only child) the
    # planted parent is missing instead
    fell_back = kind == "parent_mismatch" and next(x for x in broken["sections"] if x["id"] == where)["parent"] == "S99"
    assert kind in kinds or (fell_back and "missing_parent" in kinds), (kind, problems)
    if where is not None:
        assert any(p.section == where or where in p.message for p in problems), problems


@settings(max_examples=150, deadline=None)
@given(valid_specs(), st.sampled_from(STRUCTURE_KINDS), st.integers(0, 50))
def test_structural_errors_are_repaired_by_renumbering_with_content_kept(data: dict[str, Any], kind: str,
                                                                          i: int) -> None:
    broken, _ = break_spec(json.loads(json.dumps(data)), kind, i)
    resolution = resolve(json.dumps(broken))
    assert resolution.outcome in ("repaired", "valid")
    assert validate_spec(resolution.spec) == []
    # no section lost or invented, none edited: renumbering moves a section only under the parent it names
    assert sorted(s.model_dump_json(exclude={"id", "parent", "order"}) for s in resolution.spec.sections) == sorted(
        ResearchSpec.model_validate(broken).sections[i].model_dump_json(exclude={"id", "parent", "order"})
        for i in range(len(broken["sections"])))


@settings(max_examples=60, deadline=None)
@given(valid_specs(), st.integers(0, 50))
def test_missing_fields_revert_to_the_last_valid_candidate(data: dict[str, Any], i: int) -> None:
    fallback = ResearchSpec.model_validate(data)
    broken, where = break_spec(json.loads(json.dumps(data)), "missing_field", i)
    resolution = resolve(json.dumps(broken), fallback=fallback)
    assert resolution.outcome == "reverted" and resolution.spec == fallback
    assert any(p.kind == "missing_field" and p.section == where for p in resolution.problems)


def test_the_planner_repairs_the_named_problems() -> None:
    good = {"query": "q", "title": "T", "sections": [
        {"id": "S1", "parent": None, "order": 1, "title": "A", "scope": "a", "research_questions": ["a?"]}]}
    bad = {**good, "sections": [{**good["sections"][0], "research_questions": []}]}
    asked: list[list[str]] = []

    def fix(reply: str, problems: list) -> str:
        asked.append([str(p) for p in problems])
        return "Here it is:\n```json\n" + json.dumps(good) + "\n```"

    resolution = resolve(json.dumps(bad), model_repair=fix, attempts=1)
    assert resolution.outcome == "repaired" and resolution.repairs == ("model repair 1",)
    assert asked == [["[missing_field] section S1: no research question"]]


@pytest.mark.parametrize(("reply", "kind"), [
    ("I cannot plan this.", "malformed"),
    ('```json\n{"query": "q", "title": "T", "sections": [{"id": "S1"}]}\n```', "schema"),
    ('{"query": "q", "title": "T", "sections": []}', "no_sections"),
    ('{"query": "q", "title": "T", "sections": "S1"}', "schema"),
])
def test_with_nothing_valid_dispatch_stops_naming_each_problem(reply: str, kind: str) -> None:
    with pytest.raises(ResearchSpecError) as caught:
        resolve(reply, model_repair=lambda r, p: reply, attempts=2, context="plan/writer/1")
    assert kind in {p.kind for p in caught.value.problems}
    assert str(caught.value).startswith("plan/writer/1: the ResearchSpec is invalid")
    assert f"[{kind}]" in str(caught.value)


def test_problem_kinds_are_all_reachable() -> None:
    assert set(PROBLEM_KINDS) == {"malformed", "schema", "no_sections", *STRUCTURE_KINDS, "missing_field"}
    assert parse_research_spec("{not json")[1][0].kind == "malformed"

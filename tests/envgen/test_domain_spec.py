"""Domain spec parsing: shipped specs load; malformed specs list every problem with its line; property tests."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_fixtures import MINIMAL

from envgen.domain_spec import DomainSpecError, domain_paths, load_spec, parse_domain_spec, resolve_domains


def dump(spec: dict) -> str:
    return yaml.safe_dump(spec, sort_keys=False)


@pytest.mark.parametrize("name", sorted(domain_paths()))
def test_shipped_domains_parse(name: str) -> None:
    spec = load_spec(domain_paths()[name])
    assert spec.name == name
    assert len(spec.entities) >= 6 or name not in ("airline", "retail", "telecom")


def test_minimal_spec_parses_and_hash_ignores_formatting() -> None:
    a = parse_domain_spec(dump(MINIMAL))
    b = parse_domain_spec(yaml.safe_dump(MINIMAL, sort_keys=True, default_flow_style=True))
    assert a.spec_hash == b.spec_hash


def test_every_problem_is_listed_with_its_line() -> None:
    bad = copy.deepcopy(MINIMAL)
    bad["entities"][0]["fields"][0]["type"] = "blob"  # unknown type
    bad["entities"][1]["relations"].append({"field": "shelf_id", "to": "shelf", "description": "d"})  # dangling
    bad["entities"].append(copy.deepcopy(bad["entities"][1]))  # duplicate entity name (and id_prefix)
    bad["entities"][0]["relations"] = [{"field": "box_id", "to": "box", "description": "d"}]  # owner <-> box cycle
    bad["actions"][0]["effects"][0]["field"] = "colour"  # unknown field
    bad["unexpected"] = 1  # extra key
    with pytest.raises(DomainSpecError) as info:
        parse_domain_spec(dump(bad), "bad.yaml")
    text = "\n".join(info.value.problems)
    for needle in ("blob", "dangling relation", "duplicate entity", "cyclic required relations", "colour",
                   "unexpected"):
        assert needle in text, needle
    assert all(p.startswith("line ") for p in info.value.problems)
    assert str(info.value).startswith("bad.yaml:")


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (("entities", 0, "name"), "Owner", "not an identifier"),
        (("entities", 0, "name"), "class", "reserved"),
        (("entities", 1, "fields", 0, "values"), [], "needs `values`"),
        (("actions", 0, "target"), "crate", "unknown entity"),
        (("actions", 0, "intent"), "shut {lid}", "placeholder"),
        (("actions", 0, "preconditions", 0, "value"), "ajar", "not a value"),
        (("entities", 0, "fields", 0, "faker"), "no_such_provider", "unknown Faker provider"),
        (("actions", 0, "preconditions", 0, "per"), "lid", "must name an int parameter"),
    ],
)
def test_single_problem_is_named(path: tuple, value: object, needle: str) -> None:
    bad = copy.deepcopy(MINIMAL)
    node = bad
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    with pytest.raises(DomainSpecError) as info:
        parse_domain_spec(dump(bad))
    assert any(needle in p for p in info.value.problems), info.value.problems


def test_not_yaml_and_not_mapping() -> None:
    with pytest.raises(DomainSpecError, match="not valid YAML") as info:
        parse_domain_spec("a: [b")
    assert "    a: [b\n       ^" in str(info.value)  # the line quoted, a caret under the problem
    with pytest.raises(DomainSpecError, match="top level"):
        parse_domain_spec("- 1\n- 2\n")


@pytest.mark.parametrize("name", sorted(domain_paths()))
def test_the_fast_loader_reads_every_shipped_spec_as_the_pure_python_one(name: str, monkeypatch) -> None:
    """Specs are parsed with libyaml's loader: the same document, and the same node lines for the messages."""
    from envgen import domain_spec

    assert domain_spec._FAST_LOADER is yaml.CSafeLoader  # the installed PyYAML has libyaml: the fast path runs
    text = domain_paths()[name].read_text()
    assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text)
    fast = domain_spec._line_map(text)
    monkeypatch.setattr(domain_spec, "_FAST_LOADER", yaml.SafeLoader)
    assert fast and fast == domain_spec._line_map(text)


def test_resolve_domains() -> None:
    assert set(resolve_domains("all")) >= {"airline", "retail", "telecom"}
    assert resolve_domains("airline, retail") == ["airline", "retail"]
    with pytest.raises(ValueError, match="unknown domain"):
        resolve_domains("airline,atlantis")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                    max_leaves=12))
def test_arbitrary_yaml_never_crashes(doc: object) -> None:
    """Any YAML document either parses or raises DomainSpecError, never another exception."""
    try:
        parse_domain_spec(yaml.safe_dump(doc))
    except DomainSpecError as exc:
        assert exc.problems


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["entities", "actions"]), st.integers(0, 1), st.text(max_size=12))
def test_mutated_names_parse_or_fail_cleanly(section: str, index: int, name: str) -> None:
    spec = copy.deepcopy(MINIMAL)
    items = spec[section]
    items[index % len(items)]["name"] = name
    try:
        parsed = parse_domain_spec(dump(spec))
    except DomainSpecError as exc:
        assert exc.problems
    else:
        assert name in {e.name for e in parsed.entities} | {a.name for a in parsed.actions}


def test_effects_are_checked_against_the_created_entity_and_amount_types() -> None:
    bad = copy.deepcopy(MINIMAL)
    bad["entities"][0]["fields"].append({"name": "score", "type": "int", "description": "d"})
    bad["actions"].append({
        "name": "open_box", "description": "d", "target": "owner", "intent": "open a box", "actor": "customer", "words": ["open"],
        "effects": [{"kind": "create", "entity": "box", "values": {"state": {"value": "open"}}},
                    {"kind": "adjust", "field": "score", "to": {"value": "lots"}}]})
    with pytest.raises(DomainSpecError) as info:
        parse_domain_spec(dump(bad))
    text = "\n".join(info.value.problems)
    assert "required relation(s) ['owner_id'] of box need a value" in text
    assert "adjust needs a numeric amount" in text


def test_a_broken_entity_does_not_cascade_and_yaml_booleans_are_explained() -> None:
    bad = copy.deepcopy(MINIMAL)
    bad["entities"][1]["id_prefix"] = False  # what an unquoted `id_prefix: NO` becomes
    bad["actions"][0]["target"] = "owner"
    bad["actions"][0]["preconditions"] = []
    bad["actions"][0]["effects"] = [{"kind": "create", "entity": "box", "values": {"state": {"value": "open"},
                                                                                 "owner_id": {"ref": "target.owner_id"}}}]
    with pytest.raises(DomainSpecError) as info:
        parse_domain_spec(dump(bad))
    assert len(info.value.problems) == 1, info.value.problems
    assert "quote the value" in info.value.problems[0]


def test_tool_name_clashes_are_listed_with_their_lines() -> None:
    """Entity `box_owner` compiles `get_box_owner`, as does the parent_of tool of relation `box.owner_id`."""
    bad = copy.deepcopy(MINIMAL)
    bad["entities"].append({"name": "box_owner", "description": "d", "key": "box_owner_id", "id_prefix": "BO",
                            "fields": [{"name": "note", "type": "string", "description": "d"}]})
    bad["entities"].append({"name": "crate_" + "x" * 30, "description": "d", "key": "crate_id", "id_prefix": "CR",
                            "fields": [{"name": "x" * 40, "type": "string", "unique": True, "description": "d"}]})
    bad["actions"][0]["effects"][0]["field"] = "colour"  # another problem, listed alongside
    text = dump(bad)
    with pytest.raises(DomainSpecError) as info:
        parse_domain_spec(text, "bad.yaml")
    problems = info.value.problems
    assert any("colour" in p for p in problems)
    relation_line = text.splitlines().index("  - field: owner_id") + 1
    clash = next(p for p in problems if "'get_box_owner'" in p)
    assert clash.startswith("line ") and f"(line {relation_line})" in clash and "clashes with" in clash
    assert any("over 64 characters" in p and "lookup_crate_xxx" in p for p in problems)


def test_a_spec_that_is_not_utf8_is_a_spec_error_naming_file_and_line(tmp_path) -> None:
    path = tmp_path / "mini.yaml"
    path.write_bytes(dump(MINIMAL).replace("A tiny shop.", "A tiny caf\xe9.").encode("latin-1"))
    with pytest.raises(DomainSpecError) as info:
        load_spec(path)
    assert info.value.source == str(path)
    byte = dump(MINIMAL).index("A tiny shop.") + len("A tiny caf") + 1
    assert info.value.problems == [f"line 2: not UTF-8 text (invalid continuation byte at byte {byte}); save it as UTF-8"]

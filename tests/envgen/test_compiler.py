"""Compiler and tools: every shipped domain compiles to 60+ executable tools; hostile arguments change nothing."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envgen.canonical import canonical_state
from envgen.compiler import compiled
from envgen.construct import executability
from envgen.domain_spec import domain_paths
from envgen.seeding import engine_from_bytes, generate_rows, load_rows, memory_engine, sqlite_bytes
from envgen.tools import Executor, call_tool

DOMAINS = sorted(domain_paths())


@pytest.mark.parametrize("name", DOMAINS)
def test_domain_compiles_to_a_dense_graph_of_executable_tools(name: str) -> None:
    d = compiled(name)
    assert len(d.tools) >= 60
    assert d.density > 0.05
    rate, failed = executability(d, seed=3)
    assert rate == 1.0, failed
    for u, v, data in d.graph.edges(data=True):  # u -> v: an output of u supplies a required parameter of v
        assert set(data["types"]) <= d.tools[u].outputs & d.tools[v].requires
    schemas = d.schemas()
    assert len({s["function"]["name"] for s in schemas}) == len(schemas)
    for s in schemas:
        params = s["function"]["parameters"]
        assert set(params["required"]) <= set(params["properties"]) and params["additionalProperties"] is False
    rw = d.read_write_map()
    assert all(set(m["writes"]) <= set(m["reads"]) for m in rw.values())
    assert {t for n in d.writes() for t in rw[n]["writes"]} <= set(d.tables)


@pytest.fixture(scope="module")
def airline_db() -> tuple:
    d = compiled("airline")
    engine = memory_engine()
    rows = generate_rows(d.spec, 11)
    load_rows(d, engine, rows)
    return d, sqlite_bytes(engine), rows


HOSTILE = [
    ("get_reservation", {"reservation_id": "x' OR '1'='1"}),
    ("cancel_reservation", {"reservation_id": "'; DROP TABLE reservation; --"}),
    ("upgrade_cabin", {"reservation_id": "R" * 10_000_000, "cabin": "business"}),
    ("upgrade_cabin", {"reservation_id": 12, "cabin": "business"}),
    ("upgrade_cabin", {"reservation_id": "RES1", "cabin": "first"}),
    ("add_baggage", {"reservation_id": "RES1", "weight_kg": "20"}),
    ("add_baggage", {"reservation_id": "RES1", "weight_kg": 20, "extra": True}),
    ("change_membership", {}),
    ("no_such_tool", {"a": 1}),
    ("get_user", "not json {"),
    ("get_user", "[1, 2]"),
    ("search_users", {"email": {"$ne": None}}),
]


@pytest.mark.parametrize(("tool", "args"), HOSTILE, ids=[f"{t}-{i}" for i, (t, _) in enumerate(HOSTILE)])
def test_hostile_arguments_return_an_error_and_change_nothing(airline_db: tuple, tool: str, args: object) -> None:
    d, db, _ = airline_db
    engine = engine_from_bytes(db)
    tables = list(d.tables)
    with engine.connect() as conn:
        before = canonical_state(conn, d, tables)
    result = call_tool(Executor(d), engine.begin, tool, args, d.spec.now)
    assert "error" in result.content and not result.internal_error
    with engine.connect() as conn:
        assert canonical_state(conn, d, tables) == before


def test_a_refused_write_rolls_back_its_earlier_effects(airline_db: tuple) -> None:
    """upgrade_cabin adjusts total_price before the payment balance check fails: nothing may persist."""
    d, db, rows = airline_db
    engine = engine_from_bytes(db)
    res = next(r for r in rows["reservation"] if r["status"] == "confirmed" and r["cabin"] != "business")
    with engine.begin() as conn:
        t = d.tables["payment_method"]
        conn.execute(t.update().where(t.c.payment_method_id == res["payment_method_id"]).values(balance=1.0, active=True))
        f = d.tables["flight"]
        conn.execute(f.update().where(f.c.flight_id == res["flight_id"]).values(departure="2026-06-01T10:00:00"))
    with engine.connect() as conn:
        before = canonical_state(conn, d, list(d.tables))
    result = call_tool(Executor(d), engine.begin, "upgrade_cabin",
                       {"reservation_id": res["reservation_id"], "cabin": "business"}, d.spec.now)
    assert "below its minimum" in result.content["error"]
    with engine.connect() as conn:
        assert canonical_state(conn, d, list(d.tables)) == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=6)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tool=st.sampled_from(sorted(compiled("airline").tools)),
       args=st.dictionaries(st.text(max_size=20), json_values, max_size=4))
def test_arbitrary_arguments_never_crash_a_tool(airline_db: tuple, tool: str, args: dict) -> None:
    """Any JSON arguments give a result or an error, never an internal error; refused calls change nothing."""
    d, db, _ = airline_db
    engine = engine_from_bytes(db)
    tables = list(d.tables)
    with engine.connect() as conn:
        before = canonical_state(conn, d, tables)
    result = call_tool(Executor(d), engine.begin, tool, json.dumps(args), d.spec.now)
    assert not result.internal_error, result.content
    if "error" in result.content:
        with engine.connect() as conn:
            assert canonical_state(conn, d, tables) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(max_size=300) | st.integers() | st.floats() | st.booleans())
def test_key_arguments_are_validated_by_type_and_length(airline_db: tuple, value: object) -> None:
    d, _, _ = airline_db
    model = d.tools["get_reservation"].args_model
    ok = isinstance(value, str) and len(value) <= 64
    try:
        model.model_validate({"reservation_id": value})
        assert ok
    except ValueError:
        assert not ok


def test_seeding_is_deterministic() -> None:
    d = compiled("telecom")
    assert generate_rows(d.spec, 5) == generate_rows(d.spec, 5)
    assert generate_rows(d.spec, 5) != generate_rows(d.spec, 6)
    a, b = memory_engine(), memory_engine()
    load_rows(d, a, generate_rows(d.spec, 5))
    load_rows(d, b, generate_rows(d.spec, 5))
    assert sqlite_bytes(a) == sqlite_bytes(b)


def test_seed_database_at_a_url(tmp_path) -> None:
    from sqlalchemy import func, select

    from envgen.seeding import seed_database

    d = compiled("retail")
    engine = seed_database(d, f"sqlite:///{tmp_path / 'shop.db'}", seed=3)
    with engine.connect() as conn:
        counts = {n: conn.execute(select(func.count()).select_from(t)).scalar() for n, t in d.tables.items()}
    assert counts == {e.name: e.count for e in d.spec.entities}
    engine.dispose()

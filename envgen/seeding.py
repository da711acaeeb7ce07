"""Instantiate a domain's database with Faker, seeded per environment (``seed_for``); no wall clock.

Rows are generated parents first (required relations form a DAG, checked by the spec), values from the field's
Faker provider, bothify pattern, bounds or enum. The database is built in memory and serialized to SQLite bytes,
which the environment record stores and each episode writes to its own file.
"""

from __future__ import annotations

import random
import sqlite3
import string
from datetime import timedelta
from typing import Any

import networkx as nx
from sqlalchemy import create_engine, event, insert
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool

from envgen.compiler import CLOCK_TABLE, CompiledDomain
from envgen.customers import carriers
from envgen.domain_spec import DomainSpec, EntitySpec, FieldSpec, RelationSpec, faker_for
from envgen.tools import fmt_time

Rows = dict[str, list[dict[str, Any]]]
_KEY_ALPHABET = string.ascii_uppercase + string.digits


def entity_order(spec: DomainSpec) -> list[EntitySpec]:
    g = nx.DiGraph()
    g.add_nodes_from(e.name for e in spec.entities)
    g.add_edges_from((r.to, e.name) for e in spec.entities for r in e.relations if r.required)
    order = list(nx.lexicographical_topological_sort(g))
    return [spec.entity(n) for n in order]


def field_value(f: FieldSpec, spec: DomainSpec, fake: Any, rng: random.Random) -> Any:
    if f.type == "enum":
        return rng.choice(f.values)
    if f.type == "bool":
        return rng.random() < 0.7
    if f.type == "int":
        return rng.randint(int(f.min if f.min is not None else 0), int(f.max if f.max is not None else 100))
    if f.type in ("float", "money"):
        return round(rng.uniform(f.min if f.min is not None else 0.0, f.max if f.max is not None else 1000.0),
                     2 if f.type == "money" else 1)
    if f.type in ("date", "datetime"):
        lo, hi = f.min if f.min is not None else -365, f.max if f.max is not None else 365
        minutes = rng.randint(int(lo * 1440), int(hi * 1440)) // 15 * 15
        return fmt_time(spec.now + timedelta(minutes=minutes), f.type)
    if f.pattern is not None:
        return fake.bothify(f.pattern).upper()
    if f.faker is not None:
        return str(getattr(fake, f.faker)())[:200]
    return fake.word()


def generate_rows(spec: DomainSpec, seed: int) -> Rows:
    """All rows of one environment's database, deterministic in ``seed``.

    Ownership holds along every path (``envgen.customers``): a row's owner is drawn first, among the customers who
    own a row of every parent its carrying relations need, and each of those parents is drawn among that owner's
    rows (a booking's card is one of the booking guest's own cards)."""
    rng = random.Random(seed)
    fake = faker_for(spec.locale)
    fake.seed_instance(seed)
    customer = spec.customer_entity
    rows: Rows = {}
    keys: dict[str, list[str]] = {}
    owner: dict[tuple[str, str], str | None] = {}  # (entity, key) -> the customer owning it
    by_owner: dict[str, dict[str | None, list[str]]] = {}  # entity -> owner -> keys, in generation order

    def choose_parent(r: RelationSpec, row_owner: str | None, carries: bool) -> str | None:
        """A parent for relation ``r``: of ``row_owner`` (or of nobody) when ``r`` carries ownership and the row
        has an owner, else any; None while ``r.to`` is not generated yet (an optional relation to a later entity:
        the pass below draws it)."""
        if r.to not in keys:
            return None
        options = keys[r.to]
        if row_owner is not None and carries:
            options = by_owner[r.to].get(row_owner, []) + by_owner[r.to].get(None, [])
        return rng.choice(options) if options else None

    for e in entity_order(spec):
        carrying = carriers(spec, e.name)
        ready = [r for r in carrying if keys.get(r.to)]
        # The owners a row may have: customers owning a row of every parent its required carrying relations need
        # (of any parent, when all are optional).
        required = [r for r in ready if r.required]
        pools = [set(by_owner[r.to]) - {None} for r in required or ready]
        candidates = sorted((set.intersection if required else set.union)(*pools)) if pools else []
        used: dict[str, set[Any]] = {f.name: set() for f in e.fields if f.unique}
        table, seen_keys = [], set()
        by_owner[e.name] = {}
        for _ in range(e.count):
            key = e.id_prefix + "".join(rng.choices(_KEY_ALPHABET, k=6))
            while key in seen_keys:
                key = e.id_prefix + "".join(rng.choices(_KEY_ALPHABET, k=6))
            seen_keys.add(key)
            row: dict[str, Any] = {e.key: key}
            row_owner = key if customer is not None and e.name == customer.name else (
                rng.choice(candidates) if candidates else None)
            for r in e.relations:
                row[r.field] = choose_parent(r, row_owner, r in carrying)
            if row_owner is None:  # no carrying parent was drawn for an owner: the parents drawn decide it
                row_owner = next((owner[(r.to, row[r.field])] for r in carrying if row[r.field] is not None
                                  and owner[(r.to, row[r.field])] is not None), None)
            owner[(e.name, key)] = row_owner
            by_owner[e.name].setdefault(row_owner, []).append(key)
            for f in e.fields:
                value = field_value(f, spec, fake, rng)
                if f.unique:
                    tries = 0
                    while value in used[f.name] and tries < 50:
                        value, tries = field_value(f, spec, fake, rng), tries + 1
                    if value in used[f.name]:
                        value = f"{value}{len(used[f.name])}"
                    used[f.name].add(value)
                row[f.name] = value
            table.append(row)
        rows[e.name] = table
        keys[e.name] = [r[e.key] for r in table]
    # optional relations to entities generated later get their parents now, from the row's owner's
    for e in spec.entities:
        carrying = carriers(spec, e.name)
        for r in e.relations:
            if not r.required:
                for row in rows[e.name]:
                    if row[r.field] is None and keys[r.to] and rng.random() < 0.8:
                        row[r.field] = choose_parent(r, owner[(e.name, row[e.key])], r in carrying)
    return rows


_BASE: Engine | None = None


def _begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN")


def sqlite_engine(raw: sqlite3.Connection) -> Engine:
    """An engine over one SQLite connection. All such engines share one dialect, so SQL compiled for one episode
    is reused by the next (with a fresh ``create_engine`` per episode every statement was recompiled)."""
    global _BASE
    if _BASE is None:
        _BASE = create_engine("sqlite://")
        with _BASE.connect():
            pass
    # SQLAlchemy's documented pysqlite workaround: let it emit BEGIN itself so SAVEPOINTs roll back correctly.
    raw.isolation_level = None
    engine = Engine(StaticPool(lambda: raw), _BASE.dialect, _BASE.url)
    event.listen(engine, "begin", _begin)
    return engine


def memory_engine() -> Engine:
    return sqlite_engine(sqlite3.connect(":memory:", check_same_thread=False))


def load_rows(domain: CompiledDomain, engine, rows: Rows) -> None:
    domain.create_schema(engine)
    with engine.begin() as conn:
        conn.execute(insert(domain.metadata.tables[CLOCK_TABLE]), {"now": fmt_time(domain.spec.now, "datetime")})
        for e in entity_order(domain.spec):
            if rows.get(e.name):
                conn.execute(insert(domain.tables[e.name]), rows[e.name])


def seeded_memory_engine(domain: CompiledDomain, seed: int) -> Engine:
    """An in-memory database holding environment ``seed``'s rows."""
    engine = memory_engine()
    load_rows(domain, engine, generate_rows(domain.spec, seed))
    return engine


def sqlite_bytes(engine) -> bytes:
    """Serialize an in-memory SQLite database (the stored form of an environment's database)."""
    with engine.connect() as conn:
        raw: sqlite3.Connection = conn.connection.driver_connection  # type: ignore[assignment]
        return bytes(raw.serialize())


def engine_from_bytes(data: bytes) -> Engine:
    """An in-memory engine holding a copy of serialized database bytes."""
    raw = sqlite3.connect(":memory:", check_same_thread=False)
    raw.deserialize(data)
    return sqlite_engine(raw)


def seed_database(domain: CompiledDomain, url: str, seed: int) -> Engine:
    """Create and seed a domain's database at any SQLAlchemy URL (``sqlite:///shop.db``, ``postgresql://...``).
    Environments themselves store SQLite bytes; this is for inspecting or serving a domain elsewhere."""
    engine = create_engine(url)
    load_rows(domain, engine, generate_rows(domain.spec, seed))
    return engine

"""The acting customer of a task (as tau2-bench's airline domain has one user per task): which customer owns a row,
which customer the agent has identified with the tools, and the policy "act only on the identified customer's own
records" that the reward's ``policy`` component scores.

A row's owner is found through the spec's foreign keys that carry ownership (``carriers``): every relation except
one the spec declares ``crossing`` (a reviewer, a property for sale: a link to a row that may be another
customer's). An entity with no carrying path to the customer entity (``DomainSpec.customer_entity``; a flight, an
airport) is shared and owned by nobody. A generated world agrees with itself: every carrying path from a row
reaches the same customer (a booking's card is its guest's own card). Seeding builds it so, every write keeps it so
(``link_conflict`` refuses a write that would link two customers' rows), and ``ownership_contradictions`` counts
the rows of a database where it fails. The agent has identified a customer once a read of the customer entity
(get, lookup or find) returned exactly that one customer's row.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select

from envgen.compiler import CompiledDomain
from envgen.domain_spec import DomainSpec, RelationSpec

IDENTIFYING_KINDS = ("get", "lookup", "find")
POLICY = "Act only on the identified customer's own records: identify the customer with the tools first."

Rows = Mapping[str, Sequence[Mapping[str, Any]]]


def owned_entities(spec: DomainSpec) -> frozenset[str]:
    """Entities whose rows belong to a customer: the customer entity and every entity with a carrying relation to
    an owned one."""
    customer = spec.customer_entity
    if customer is None:
        return frozenset()
    owned = {customer.name}
    grew = True
    while grew:
        grew = False
        for e in spec.entities:
            if e.name not in owned and any(not r.crossing and r.to in owned for r in e.relations):
                owned.add(e.name)
                grew = True
    return frozenset(owned)


def carriers(spec: DomainSpec, entity: str) -> tuple[RelationSpec, ...]:
    """The relations of ``entity`` that carry ownership: not crossing, to an owned entity (none for the customer
    entity itself)."""
    customer = spec.customer_entity
    if customer is None or entity == customer.name:
        return ()
    owned = owned_entities(spec)
    return tuple(r for r in spec.entity(entity).relations if not r.crossing and r.to in owned)


def path_count(spec: DomainSpec, entity: str, _seen: frozenset[str] = frozenset()) -> int:
    """How many carrying relation paths lead from ``entity`` to the customer entity (1 for the customer itself)."""
    customer = spec.customer_entity
    if customer is None:
        return 0
    if entity == customer.name:
        return 1
    return sum(path_count(spec, r.to, _seen | {entity}) for r in carriers(spec, entity) if r.to not in _seen)


def owner_path(domain: CompiledDomain, entity: str) -> tuple[str, ...] | None:
    """Carrying relation fields leading from ``entity`` to the customer entity, shortest first found; () for the
    customer itself; None when the entity is shared (no path) or the domain has no customer entity."""
    spec = domain.spec
    customer = spec.customer_entity
    if customer is None:
        return None
    queue: deque[tuple[str, tuple[str, ...]]] = deque([(entity, ())])
    seen = {entity}
    while queue:
        name, path = queue.popleft()
        if name == customer.name:
            return path
        for rel in carriers(spec, name):
            if rel.to not in seen:
                seen.add(rel.to)
                queue.append((rel.to, (*path, rel.field)))
    return None


def _get(domain: CompiledDomain, conn: Connection, entity: str, key: Any) -> dict[str, Any] | None:
    t = domain.tables[entity]
    row = conn.execute(select(t).where(t.c[domain.spec.entity(entity).key] == key)).first()
    return None if row is None else dict(row._mapping)


def owner_of(domain: CompiledDomain, conn: Connection, entity: str, key: Any) -> str | None:
    """The key of the customer owning row ``key`` of ``entity``; None for a shared row or a broken link."""
    path = owner_path(domain, entity)
    if path is None or key is None:
        return None
    row, name = _get(domain, conn, entity, key), entity
    for field in path:
        if row is None or row.get(field) is None:
            return None
        rel = domain.spec.entity(name).relation(field)
        row, name = _get(domain, conn, rel.to, row[field]), rel.to
    return None if row is None else str(row[domain.spec.entity(name).key])


def link_conflict(domain: CompiledDomain, conn: Connection, entity: str, row: Mapping[str, Any]) -> str | None:
    """Why ``row`` of ``entity`` (as it is about to be stored) would link two customers' records: its carrying
    relations point at rows of different owners; None when they agree."""
    owners: dict[str, str] = {}
    for r in carriers(domain.spec, entity):
        if row.get(r.field) is not None:
            owner = owner_of(domain, conn, r.to, row[r.field])
            if owner is not None:
                owners.setdefault(owner, f"{r.to} {row[r.field]}")
    if len(owners) < 2:
        return None
    first, second = list(owners.values())[:2]
    return f"{first} and {second} belong to different customers; a {entity.replace('_', ' ')} links one customer's records"


def database_rows(domain: CompiledDomain, conn: Connection) -> dict[str, list[dict[str, Any]]]:
    """Every row of every entity table."""
    return {e.name: [dict(r._mapping) for r in conn.execute(select(domain.tables[e.name]))]
            for e in domain.spec.entities}


def row_owners(spec: DomainSpec, rows: Rows) -> dict[str, dict[Any, frozenset[str]]]:
    """Per entity and key, the customers its carrying paths reach (empty for shared rows, two or more where the
    database contradicts itself)."""
    customer = spec.customer_entity
    by_key = {e.name: {r[e.key]: r for r in rows.get(e.name, ())} for e in spec.entities}
    carrying = {e.name: carriers(spec, e.name) for e in spec.entities}  # once per entity, not per row
    memo: dict[tuple[str, Any], frozenset[str]] = {}

    def owners(entity: str, key: Any, seen: frozenset[str]) -> frozenset[str]:
        if (entity, key) in memo:
            return memo[(entity, key)]
        row = by_key[entity].get(key)
        if row is None:
            found: frozenset[str] = frozenset()
        elif customer is not None and entity == customer.name:
            found = frozenset({str(key)})
        else:
            found = frozenset().union(*(owners(r.to, row[r.field], seen | {entity})
                                        for r in carrying[entity]
                                        if row.get(r.field) is not None and r.to not in seen))
        memo[(entity, key)] = found
        return found

    return {e.name: {key: owners(e.name, key, frozenset()) for key in by_key[e.name]} for e in spec.entities}


def ownership_contradictions(spec: DomainSpec, rows: Rows) -> list[tuple[str, Any, tuple[str, ...]]]:
    """(entity, key, owners) of every row whose carrying paths reach two or more customers."""
    return [(entity, key, tuple(sorted(found))) for entity, keyed in row_owners(spec, rows).items()
            for key, found in keyed.items() if len(found) > 1]


def written_rows(domain: CompiledDomain, name: str, arguments: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(entity, key) of the rows a write names: its target first, then every parameter referring to a row."""
    tool = domain.tools[name]
    action = domain.spec.action(tool.action)
    target = domain.spec.entity(action.target)
    rows = [(target.name, arguments.get(target.key))]
    rows += [(q.ref, arguments.get(q.name)) for q in action.params if q.ref is not None]
    return [(entity, key) for entity, key in rows if key is not None]


def identified_customers(domain: CompiledDomain, name: str, content: Any) -> set[str]:
    """Customers a successful read identifies: a read of the customer entity returning exactly one of its rows."""
    customer = domain.spec.customer_entity
    tool = domain.tools.get(name)
    if customer is None or tool is None or tool.entity != customer.name or tool.kind not in IDENTIFYING_KINDS:
        return set()
    rows = content.get("results") if isinstance(content, dict) and "results" in content else [content]
    rows = [r for r in rows or [] if isinstance(r, dict) and customer.key in r]
    return {str(rows[0][customer.key])} if len(rows) == 1 else set()


def _identified(domain: CompiledDomain, conn: Connection, entry: Mapping[str, Any]) -> set[str]:
    """The customers a logged read identified. A response the task's tool noise altered (a renamed field, a
    drifted case) is read again on the database: the noise is the verifier's to see through (DESIGN.md section 7),
    and the same read with the same arguments returns whom the agent found."""
    name = str(entry.get("name"))
    found = identified_customers(domain, name, entry.get("content"))
    customer = domain.spec.customer_entity
    tool = domain.tools.get(name)
    if customer is None or tool is None or tool.entity != customer.name or tool.kind not in IDENTIFYING_KINDS or (
            found and all(_get(domain, conn, customer.name, k) is not None for k in found)):
        return found
    column = customer.key if tool.kind == "get" else tool.column
    value = _arguments(entry.get("arguments")).get(column)
    t = domain.tables[customer.name]
    rows = conn.execute(select(t.c[customer.key]).where(t.c[column] == value).limit(2)).all() if value else []
    return {str(rows[0][0])} if len(rows) == 1 else set()


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def customer_policy_problem(domain: CompiledDomain, conn: Connection, tool_log: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the episode breaks "act only on the identified customer's own records" (``tool_log`` is the
    environment's log, oldest first): a successful write before any customer was identified, or one naming a row
    another customer owns; None when every write keeps to the identified customer."""
    identified: set[str] = set()
    for entry in tool_log:
        if not entry.get("ok"):
            continue
        name = str(entry.get("name"))
        if not entry.get("wrote"):
            identified |= _identified(domain, conn, entry)
            continue
        if not identified:
            return f"{name} wrote before the customer was identified"
        for entity, key in written_rows(domain, name, _arguments(entry.get("arguments"))):
            owner = owner_of(domain, conn, entity, key)
            if owner is not None and owner not in identified:
                return f"{name} changed {entity} {key} of customer {owner}, not of the identified customer"
    return None

"""The acting customer of a task (as tau2-bench's airline domain has one user per task): which customer owns a row,
which customer the agent has identified with the tools, and the policy "act only on the identified customer's own
records" that the reward's ``policy`` component scores.

A row's owner is found through the spec's foreign keys: the shortest path of relations from its entity to the
customer entity (``DomainSpec.customer_entity``; reservation -> user, refund -> reservation -> user). An entity
with no such path (a flight, an airport) is shared and owned by nobody. The agent has identified a customer once a
read of the customer entity (get, lookup or find) returned exactly that one customer's row.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from envgen.compiler import CompiledDomain
from envgen.tools import Executor

IDENTIFYING_KINDS = ("get", "lookup", "find")
POLICY = "Act only on the identified customer's own records: identify the customer with the tools first."


def owner_path(domain: CompiledDomain, entity: str) -> tuple[str, ...] | None:
    """Relation fields leading from ``entity`` to the customer entity, shortest first found; () for the customer
    itself; None when the entity is shared (no path) or the domain has no customer entity."""
    customer = domain.spec.customer_entity
    if customer is None:
        return None
    queue: deque[tuple[str, tuple[str, ...]]] = deque([(entity, ())])
    seen = {entity}
    while queue:
        name, path = queue.popleft()
        if name == customer.name:
            return path
        for rel in domain.spec.entity(name).relations:
            if rel.to not in seen:
                seen.add(rel.to)
                queue.append((rel.to, (*path, rel.field)))
    return None


def owner_of(domain: CompiledDomain, conn: Connection, entity: str, key: Any) -> str | None:
    """The key of the customer owning row ``key`` of ``entity``; None for a shared row or a broken link."""
    path = owner_path(domain, entity)
    if path is None or key is None:
        return None
    ex = Executor(domain)
    row = ex.get(conn, entity, key)
    name = entity
    for field in path:
        if row is None or row.get(field) is None:
            return None
        rel = next(r for r in domain.spec.entity(name).relations if r.field == field)
        row, name = ex.get(conn, rel.to, row[field]), rel.to
    return None if row is None else str(row[domain.spec.entity(name).key])


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


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def customer_policy_problem(domain: CompiledDomain, conn: Connection, tool_log: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the episode breaks "act only on the identified customer's own records" (``tool_log`` is the runtime's
    log, oldest first): a successful write before any customer was identified, or one naming a row another customer
    owns; None when every write keeps to the identified customer."""
    identified: set[str] = set()
    for entry in tool_log:
        if not entry.get("ok"):
            continue
        name = str(entry.get("name"))
        if not entry.get("wrote"):
            identified |= identified_customers(domain, name, entry.get("content"))
            continue
        if not identified:
            return f"{name} wrote before the customer was identified"
        for entity, key in written_rows(domain, name, _arguments(entry.get("arguments"))):
            owner = owner_of(domain, conn, entity, key)
            if owner is not None and owner not in identified:
                return f"{name} changed {entity} {key} of customer {owner}, not of the identified customer"
    return None

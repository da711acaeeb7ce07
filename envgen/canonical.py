"""Canonical database state and diffs: what rubrics compare (DESIGN.md section 7).

A canonical state holds only the tables a task can touch, rows sorted by primary key. A diff lists, per table,
the changed fields of existing rows, the created rows and the deleted keys. Generated ids (keys of created rows and
references to them) and timestamps of created rows are masked, so an agent that creates the right row in another
order, or at another position, still matches. Never an order-sensitive hash of the raw file.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection

from envgen.compiler import CompiledDomain

State = dict[str, dict[str, dict[str, Any]]]  # table -> key -> row
NEW_ID = "<new-id>"
TIMESTAMP = "<timestamp>"


def _norm(v: Any) -> Any:
    return round(v, 6) if isinstance(v, float) else v


def canonical_state(conn: Connection, domain: CompiledDomain, tables: list[str]) -> State:
    """Rows of ``tables`` keyed by primary key, in key order. Read through the DBAPI cursor: the SQLAlchemy row
    machinery was most of a replay's time (table and key names are spec identifiers, checked at parse time)."""
    state: State = {}
    raw = conn.connection.driver_connection
    for name in sorted(tables):
        e = domain.spec.entity(name)
        cols = e.column_names
        bools = [i for i, c in enumerate(cols) if (f := e.field(c)) is not None and f.type == "bool"]
        quoted = ", ".join(f'"{c}"' for c in cols)
        select = f'SELECT {quoted} FROM "{name}" ORDER BY "{e.key}"'
        rows: dict[str, dict[str, Any]] = {}
        for r in raw.execute(select):
            values = [_norm(v) for v in r]
            for i in bools:
                values[i] = None if values[i] is None else bool(values[i])
            rows[r[0]] = dict(zip(cols, values))
        state[name] = rows
    return state


def diff_states(before: State, after: State, domain: CompiledDomain) -> dict[str, Any]:
    created_keys = {k for name in after for k in after[name].keys() - before.get(name, {}).keys()}

    def mask(v: Any) -> Any:
        return NEW_ID if v in created_keys else v

    out: dict[str, Any] = {}
    for name in sorted(after):
        e = domain.spec.entity(name)
        stamps = {f.name for f in e.fields if f.type in ("date", "datetime")}
        old, new = before.get(name, {}), after[name]
        changed = {}
        for key in sorted(old.keys() & new.keys()):
            delta = {c: mask(v) for c, v in new[key].items() if old[key].get(c) != v}
            if delta:
                changed[key] = delta
        created = sorted(
            (
                {c: (TIMESTAMP if c in stamps else mask(v)) for c, v in new[k].items()}
                for k in new.keys() - old.keys()
            ),
            key=lambda r: json.dumps(r, sort_keys=True, default=str),
        )
        deleted = sorted(old.keys() - new.keys())
        if changed or created or deleted:
            out[name] = {"changed": changed, "created": created, "deleted": deleted}
    return out

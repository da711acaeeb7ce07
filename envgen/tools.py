"""Generic tool implementations, interpreted from the compiled spec (no generated code, bound parameters only).

``call_tool`` is the single entry point: it validates the arguments against the tool's pydantic model (unknown
fields, wrong types, over-long strings are an ``{"error": ...}`` result), runs the tool inside one transaction,
and rolls back on any failed precondition or constraint, so a refused call leaves the database unchanged.
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, func, select

from envgen.compiler import PAGE_LIMIT, CompiledDomain, Tool
from envgen.customers import link_conflict
from envgen.domain_spec import ActionSpec, Condition, EntitySpec, Operand, action_rows

MAX_ARGUMENT_BYTES = 65_536

Row = dict[str, Any]


class ToolError(Exception):
    """A refusal the agent should see (not found, precondition failed, constraint violated)."""


@dataclass(frozen=True)
class ToolResult:
    content: dict[str, Any]
    wrote: bool = False  # a write action succeeded
    violations: tuple[str, ...] = ()  # unenforced policies the call broke
    internal_error: bool = False  # the tool itself failed (labelled `tool`, never `agent`)

    @property
    def ok(self) -> bool:
        return "error" not in self.content


def fmt_time(t: datetime, kind: str) -> str:
    return t.date().isoformat() if kind == "date" else t.replace(microsecond=0).isoformat()


def render_value(value: Any) -> str:
    """How task records write a value (text, profile facts, required outputs): money-like floats with 2 decimals."""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


_SNAKE_WORDS = re.compile(r"[a-z]+(?:_[a-z]+)+")


def spoken(value: Any) -> str:
    """How a person says a value: an enum's snake_case words as words ("wrong order" for ``wrong_order``), anything
    else as :func:`render_value` writes it. The agent maps the words back to the value the tool's enum offers."""
    text = render_value(value)
    return text.replace("_", " ") if _SNAKE_WORDS.fullmatch(text) else text


def _json_row(entity: EntitySpec, row: Any) -> Row:
    out = dict(row._mapping)
    for f in entity.fields:
        if f.type == "money" and out.get(f.name) is not None:
            out[f.name] = round(float(out[f.name]), 2)
    return out


_OPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
        "ge": operator.ge, "in": lambda a, b: a in b, "not_in": lambda a, b: a not in b}


class ActionContext:
    """Rows, parameters and now of one action call (also used by the constructor to patch rows)."""

    def __init__(self, rows: dict[str, Row | None], ents: dict[str, EntitySpec], params: Row, now: datetime) -> None:
        self.rows, self.ents, self.params, self.now = rows, ents, params, now

    def field_kind(self, row: str, column: str) -> str:
        f = self.ents[row].field(column)
        return f.type if f is not None else "key"

    def value(self, o: Operand, kind: str) -> Any:
        value = self._plain(o, kind)
        return value * self.params[o.per] if o.per is not None and value is not None else value

    def _plain(self, o: Operand, kind: str) -> Any:
        if o.param is not None:
            return self.params[o.param]
        if o.ref is not None:
            row, column = o.ref.split(".")
            return (self.rows.get(row) or {}).get(column)
        if o.now:
            return fmt_time(self.now + timedelta(days=o.days), kind)
        return o.value

    def holds(self, c: Condition) -> bool:
        row = self.rows.get(c.row)
        if row is None:
            return False
        left, right = row.get(c.field), self.value(c, self.field_kind(c.row, c.field))
        if left is None or right is None:
            return c.op == "ne" and left != right
        try:
            return bool(_OPS[c.op](left, right))
        except TypeError:
            return False


def action_conditions(domain: CompiledDomain, action: ActionSpec) -> tuple[list[Condition], list[tuple[str, Condition]]]:
    """(enforced conditions, [(policy name, condition)] of unenforced policies) of an action."""
    enforced = list(action.preconditions)
    soft = []
    for pol in domain.spec.policies:
        if action.name in pol.actions:
            if pol.enforced:
                enforced.extend(pol.conditions)
            else:
                soft.extend((pol.name, c) for c in pol.conditions)
    return enforced, soft


class Executor:
    """Runs the tools of one compiled domain on a connection."""

    def __init__(self, domain: CompiledDomain) -> None:
        self.domain = domain
        self.ents = {e.name: e for e in domain.spec.entities}

    def fetch(self, conn: Connection, entity: str, column: str, value: Any, limit: int | None = 1, offset: int = 0):
        e, t = self.ents[entity], self.domain.tables[entity]
        q = select(t)
        if column:
            q = q.where(t.c[column] == value)
        q = q.order_by(t.c[e.key]).offset(offset)
        if limit is not None:
            q = q.limit(limit)
        return [_json_row(e, r) for r in conn.execute(q)]

    def get(self, conn: Connection, entity: str, key: Any) -> Row | None:
        rows = self.fetch(conn, entity, self.ents[entity].key, key)
        return rows[0] if rows else None

    def _page(self, rows: list[Row]) -> dict[str, Any]:
        return {"results": rows[:PAGE_LIMIT], "truncated": len(rows) > PAGE_LIMIT}

    def read(self, conn: Connection, tool: Tool, args: Row) -> dict[str, Any]:
        e = self.ents[tool.entity]
        if tool.kind == "get":
            row = self.get(conn, e.name, args[e.key])
            if row is None:
                raise ToolError(f"no {e.name} with {e.key} {args[e.key]!r}")
            return row
        if tool.kind == "lookup":
            rows = self.fetch(conn, e.name, tool.column, args[tool.column])
            if not rows:
                raise ToolError(f"no {e.name} with {tool.column} {args[tool.column]!r}")
            return rows[0]
        if tool.kind in ("find", "list_by"):
            return self._page(self.fetch(conn, e.name, tool.column, args[tool.column], PAGE_LIMIT + 1))
        if tool.kind == "count_by":
            t = self.domain.tables[e.name]
            n = conn.execute(select(func.count()).select_from(t).where(t.c[tool.column] == args[tool.column])).scalar()
            return {"count": int(n or 0)}
        if tool.kind == "list":
            return self._page(self.fetch(conn, e.name, "", None, PAGE_LIMIT + 1, args.get("offset") or 0))
        if tool.kind == "search":
            t = self.domain.tables[e.name]
            q = select(t)
            for k, v in args.items():
                if v is not None:
                    q = q.where(t.c[k] == v)
            rows = [_json_row(e, r) for r in conn.execute(q.order_by(t.c[e.key]).limit(PAGE_LIMIT + 1))]
            return self._page(rows)
        if tool.kind == "parent_of":
            child = self.ents[tool.child]
            row = self.get(conn, child.name, args[child.key])
            if row is None:
                raise ToolError(f"no {child.name} with {child.key} {args[child.key]!r}")
            parent = self.get(conn, e.name, row[tool.column]) if row[tool.column] is not None else None
            if parent is None:
                raise ToolError(f"{child.name} {args[child.key]!r} has no {tool.column}")
            return parent
        raise ToolError(f"tool kind {tool.kind!r} is not a read")  # unreachable for compiled tools

    def act(self, conn: Connection, tool: Tool, args: Row, now: datetime) -> tuple[dict[str, Any], tuple[str, ...]]:
        spec = self.domain.spec
        action = spec.action(tool.action)
        row_ents = action_rows(action, self.ents)
        target_e = self.ents[action.target]
        target = self.get(conn, target_e.name, args[target_e.key])
        if target is None:
            raise ToolError(f"no {target_e.name} with {target_e.key} {args[target_e.key]!r}")
        rows: dict[str, Row | None] = {"target": target}
        for q in action.params:
            if q.ref is not None:
                rows[q.name] = self.get(conn, q.ref, args[q.name])
                if rows[q.name] is None:
                    raise ToolError(f"no {q.ref} with {self.ents[q.ref].key} {args[q.name]!r}")
        for r in target_e.relations:
            if r.field not in rows:
                rows[r.field] = self.get(conn, r.to, target[r.field]) if target[r.field] is not None else None
        ctx = ActionContext(rows, row_ents, args, now)
        enforced, soft = action_conditions(self.domain, action)
        for c in enforced:
            if not ctx.holds(c):
                raise ToolError(c.message)
        violations = tuple(sorted({name for name, c in soft if not ctx.holds(c)}))
        created: dict[str, Row] = {}
        linked: list[tuple[str, Row]] = []  # rows whose relations the effects set: checked for one owner below
        for eff in action.effects:
            if eff.kind == "create":
                created[eff.entity] = self._create(conn, eff.entity, {k: ctx.value(o, "datetime" if o.now else "")
                                                                      for k, o in eff.values.items()}, ctx)
                linked.append((eff.entity, created[eff.entity]))
                continue
            ent, row = row_ents[eff.row], rows[eff.row]
            if row is None:
                raise ToolError(f"the {eff.row} of this {target_e.name} is not set")
            kind = ctx.field_kind(eff.row, eff.field)
            value = ctx.value(eff.to, kind)
            if eff.kind == "adjust":
                value = row[eff.field] + eff.scale * value
            self._check_bounds(ent, eff.field, value)
            value = self._coerce(ent, eff.field, value)
            t = self.domain.tables[ent.name]
            conn.execute(t.update().where(t.c[ent.key] == row[ent.key]).values({eff.field: value}))
            row[eff.field] = value
            if ent.relation(eff.field) is not None:
                linked.append((ent.name, row))
        # A write keeps the world consistent: a row it links never joins two customers' records.
        for entity, row in linked:
            if (conflict := link_conflict(self.domain, conn, entity, row)) is not None:
                raise ToolError(conflict)
        result: dict[str, Any] = {"ok": True, target_e.name: rows["target"]}
        if created:
            result["created"] = created
        return result, violations

    @staticmethod
    def _coerce(ent: EntitySpec, column: str, value: Any) -> Any:
        f = ent.field(column)
        if f is None or value is None:
            return value
        if f.type == "int":
            return round(value)
        if f.type == "money":
            return round(float(value), 2)
        if f.type == "float":
            return float(value)
        return value

    @staticmethod
    def _check_bounds(ent: EntitySpec, column: str, value: Any) -> None:
        f = ent.field(column)
        if f is None or f.type not in ("int", "float", "money"):
            if f is not None and f.type == "enum" and value not in f.values:
                raise ToolError(f"{value!r} is not a valid {column}; allowed: {list(f.values)}")
            return
        if f.min is not None and value < f.min:
            raise ToolError(f"this would make {ent.name}.{column} {round(value, 2)}, below its minimum {f.min:g}")
        if f.max is not None and value > f.max:
            raise ToolError(f"this would make {ent.name}.{column} {round(value, 2)}, above its maximum {f.max:g}")

    def _create(self, conn: Connection, entity: str, values: Row, ctx: ActionContext) -> Row:
        """Insert a row; unspecified columns get type defaults (deterministic: tools never draw randomness)."""
        e, t = self.ents[entity], self.domain.tables[entity]
        n = conn.execute(select(func.count()).select_from(t)).scalar() or 0
        key = f"{e.id_prefix}N{n + 1:05d}"
        while self.get(conn, entity, key) is not None:
            n += 1
            key = f"{e.id_prefix}N{n + 1:05d}"
        row: Row = {e.key: key}
        for r in e.relations:
            row[r.field] = values.get(r.field)
            if row[r.field] is not None and self.get(conn, r.to, row[r.field]) is None:
                raise ToolError(f"no {r.to} with id {row[r.field]!r}")
        for f in e.fields:
            if f.name in values:
                v = values[f.name]
                if f.type == "date" and isinstance(v, str):
                    v = v[:10]
            elif f.type == "enum":
                v = f.values[0]
            elif f.type in ("int", "float", "money"):
                v = f.min if f.min is not None else 0
            elif f.type == "bool":
                v = False
            elif f.type in ("date", "datetime"):
                v = fmt_time(ctx.now, f.type)
            else:
                v = key if f.unique else ""
            self._check_bounds(e, f.name, v)
            row[f.name] = self._coerce(e, f.name, v)
        conn.execute(t.insert().values(row))
        return row


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """OpenAI tool-call arguments (a JSON string) -> dict, refusing oversize or non-object payloads."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        raise ToolError("arguments must be a JSON object")
    if len(raw) > MAX_ARGUMENT_BYTES:
        raise ToolError(f"arguments are {len(raw)} bytes; the limit is {MAX_ARGUMENT_BYTES}")
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON: {exc.msg}") from None
    if not isinstance(parsed, dict):
        raise ToolError("arguments must be a JSON object")
    return parsed


def validation_message(tool: Tool, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: {err['msg']}")
    allowed = ", ".join(p.name for p in tool.params) or "none"
    return f"invalid arguments for {tool.name} ({'; '.join(parts)}); parameters: {allowed}"


def call_tool(executor: Executor, conn_factory, name: str, raw_args: Any, now: datetime) -> ToolResult:
    """Validate and run one tool call. ``conn_factory()`` returns a context manager yielding a connection in a
    transaction (``engine.begin``) that rolls back on exception."""
    tool = executor.domain.tools.get(name)
    if tool is None:
        return ToolResult({"error": f"unknown tool {name!r}"})
    try:
        args = tool.args_model.model_validate(parse_arguments(raw_args)).model_dump()
    except ToolError as exc:
        return ToolResult({"error": str(exc)})
    except ValidationError as exc:
        return ToolResult({"error": validation_message(tool, exc)})
    try:
        with conn_factory() as conn:
            conn.execution_options(compiled_cache=executor.domain.sql_cache)
            if tool.is_write:
                content, violations = executor.act(conn, tool, args, now)
                return ToolResult(content, wrote=True, violations=violations)
            return ToolResult(executor.read(conn, tool, args))
    except ToolError as exc:
        return ToolResult({"error": str(exc)})
    except Exception as exc:  # noqa: BLE001 - a defect of the environment, never the agent's: labelled `tool`
        return ToolResult({"error": f"internal error in {name}: {type(exc).__name__}"}, internal_error=True)

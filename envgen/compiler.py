"""Compile a DomainSpec into an executable domain: tables, tools, schemas, the read/write map and the graph.

This is the report's Domain Graph Construction (LongCat-Flash-Thinking-2601, section 3.1.1): from one domain
specification we derive (1) the tool set, (2) a unified database schema and (3) explicit tool-to-table mappings,
plus the dependency graph whose edge u -> v means an output field of u supplies a required parameter of v.
Nothing is generated as source text: tools are data (:class:`Tool`) interpreted by ``envgen.tools``.

Each value carries a *semantic type*: the key of entity E and every foreign key to E have type ``"E"``; any other
field f of E has type ``"E.f"``. A parameter is supplied by a tool whose returned rows carry its semantic type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Annotated, Any, Literal

import networkx as nx
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, create_model
from sqlalchemy import Boolean, Column, Engine, Float, ForeignKey, Integer, MetaData, String, Table
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.schema import CreateIndex, CreateTable

from envgen.domain_spec import NUMERIC_TYPES, DomainSpec, EntitySpec, FieldType, load_domain, read_tool_names

ToolKind = Literal["get", "lookup", "find", "list", "search", "list_by", "count_by", "parent_of", "action"]
READ_KINDS = frozenset({"get", "lookup", "find", "list", "search", "list_by", "count_by", "parent_of"})
MAX_KEY_LEN = 64
MAX_STRING_LEN = 256  # hostile 10 MB strings stop at validation, never reach SQL
PAGE_LIMIT = 50
CLOCK_TABLE = "_clock"
_DATE_RE = r"^\d{4}-\d{2}-\d{2}$"
_DATETIME_RE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$"


@dataclass(frozen=True)
class ToolParam:
    name: str
    field_type: FieldType | Literal["key"]
    description: str
    required: bool
    sem: str | None  # semantic type; None for free parameters (offsets, limits, action options)
    values: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def json_schema(self) -> dict[str, Any]:
        t = self.field_type
        out: dict[str, Any] = {"description": self.description}
        if t in ("int",):
            out["type"] = "integer"
        elif t in ("float", "money"):
            out["type"] = "number"
        elif t == "bool":
            out["type"] = "boolean"
        else:
            out["type"] = "string"
        if self.values:
            out["enum"] = list(self.values)
        if t == "date":
            out["format"] = "date"
        if t == "datetime":
            out["description"] += " (YYYY-MM-DDTHH:MM:SS)"
        if self.minimum is not None and t in NUMERIC_TYPES:
            out["minimum"] = self.minimum
        if self.maximum is not None and t in NUMERIC_TYPES:
            out["maximum"] = self.maximum
        return out

    def annotation(self) -> Any:
        """The pydantic type that validates this parameter (strict: no silent coercion of '1' to 1)."""
        t = self.field_type
        bounds = {k: v for k, v in (("ge", self.minimum), ("le", self.maximum)) if v is not None}
        if self.values:
            return Literal[tuple(self.values)]  # type: ignore[valid-type]
        if t == "int":
            return Annotated[StrictInt, Field(**{k: int(v) for k, v in bounds.items()})]
        if t in ("float", "money"):
            return Annotated[float, Field(strict=True, allow_inf_nan=False, **bounds)]
        if t == "bool":
            return StrictBool
        if t == "date":
            return Annotated[str, Field(pattern=_DATE_RE, max_length=10)]
        if t == "datetime":
            return Annotated[str, Field(pattern=_DATETIME_RE, max_length=19)]
        return Annotated[str, Field(max_length=MAX_KEY_LEN if t == "key" else MAX_STRING_LEN)]


@dataclass(frozen=True)
class Tool:
    name: str
    kind: ToolKind
    entity: str  # entity of the returned rows (the target entity for actions)
    description: str
    params: tuple[ToolParam, ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    outputs: frozenset[str]  # semantic types carried by the result
    column: str | None = None  # lookup/find: the field; list_by/count_by/parent_of: the relation column
    child: str | None = None  # list_by/count_by/parent_of: the entity holding the relation column
    action: str | None = None  # action name for write tools

    @property
    def is_write(self) -> bool:
        return self.kind == "action"

    @cached_property
    def requires(self) -> frozenset[str]:
        return frozenset(p.sem for p in self.params if p.required and p.sem is not None)

    @cached_property
    def args_model(self) -> type[BaseModel]:
        fields = {p.name: (p.annotation(), ... if p.required else None) for p in self.params}
        return create_model(  # type: ignore[call-overload]
            f"{self.name}_args", __config__=ConfigDict(extra="forbid", frozen=True), **fields
        )

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {p.name: p.json_schema() for p in self.params},
                    "required": [p.name for p in self.params if p.required],
                    "additionalProperties": False,
                },
            },
        }


def sem_type(entity: EntitySpec, column: str) -> str:
    if column == entity.key:
        return entity.name
    rel = entity.relation(column)
    return rel.to if rel is not None else f"{entity.name}.{column}"


def _row_types(entity: EntitySpec) -> frozenset[str]:
    return frozenset(sem_type(entity, c) for c in entity.column_names)


def _column_param(entity: EntitySpec, column: str, required: bool, description: str | None = None) -> ToolParam:
    if column == entity.key or entity.relation(column) is not None:
        rel = entity.relation(column)
        desc = description or (rel.description if rel else f"The {entity.name} id.")
        return ToolParam(column, "key", desc, required, sem_type(entity, column))
    f = entity.field(column)
    assert f is not None  # columns come from the spec itself
    return ToolParam(column, f.type, description or f.description, required, sem_type(entity, column), f.values,
                     f.min if f.type in NUMERIC_TYPES else None, f.max if f.type in NUMERIC_TYPES else None)


def _read_tools(spec: DomainSpec) -> list[Tool]:
    tools: list[Tool] = []
    ents = {e.name: e for e in spec.entities}
    for e in spec.entities:
        out, pl, t = _row_types(e), e.plural_name, (e.name,)
        for name, kind, column, _ in read_tool_names(e):
            if kind == "get":
                tools.append(Tool(name, kind, e.name, f"Get one {e.name} by its {e.key}. {e.description}",
                                  (_column_param(e, e.key, True),), t, (), out))
            elif kind == "list":
                tools.append(Tool(name, kind, e.name, f"List {pl} in {e.key} order, {PAGE_LIMIT} per page.", (
                    ToolParam("offset", "int", "Rows to skip.", False, None, minimum=0, maximum=100_000),), t, (), out))
            elif kind == "search":
                filters = [c for c in e.column_names[1:]
                           if e.relation(c) or e.field(c).type in ("enum", "bool", "string")]
                tools.append(Tool(name, kind, e.name,
                                  f"Search {pl} by exact values of any of the given fields (all optional).",
                                  tuple(_column_param(e, c, False) for c in filters), t, (), out))
            elif kind in ("lookup", "find"):
                what = f"the {e.name} with this {column}" if kind == "lookup" else f"{pl} whose {column} equals the value"
                tools.append(Tool(name, kind, e.name, f"Find {what}.", (_column_param(e, column, True),), t, (), out,
                                  column=column))
            else:  # list_by, count_by, parent_of: through the relation `column`
                r = e.relation(column)
                by = (_column_param(e, r.field, True, f"The {r.to} id ({r.description.rstrip('.').lower()})."),)
                if kind == "list_by":
                    tools.append(Tool(name, kind, e.name, f"List {pl} linked by {r.field}: {r.description}",
                                      by, t, (), out, column=r.field, child=e.name))
                elif kind == "count_by":
                    tools.append(Tool(name, kind, e.name, f"Count {pl} linked by {r.field}.",
                                      by, t, (), frozenset(), column=r.field, child=e.name))
                else:
                    tools.append(Tool(
                        name, kind, r.to, f"Get the {r.to} of a {e.name} ({r.description.rstrip('.').lower()}).",
                        (_column_param(e, e.key, True),), (e.name, r.to), (), _row_types(ents[r.to]),
                        column=r.field, child=e.name))
    return tools


def _action_tool(spec: DomainSpec, action_name: str) -> Tool:
    a = spec.action(action_name)
    ents = {e.name: e for e in spec.entities}
    target = ents[a.target]
    params = [_column_param(target, target.key, True, f"The {target.name} to act on.")]
    for q in a.params:
        if q.ref is not None:
            params.append(ToolParam(q.name, "key", q.description, True, q.ref))
        else:
            params.append(ToolParam(q.name, q.type or "string", q.description, True, None, q.values, q.min, q.max))
    rows = {"target": target} | {r.field: ents[r.to] for r in target.relations}
    rows |= {q.name: ents[q.ref] for q in a.params if q.ref is not None}
    conds = [*a.preconditions, *(c for pol in spec.policies if a.name in pol.actions for c in pol.conditions)]
    reads = {target.name, *(rows[c.row].name for c in conds)}
    reads |= {rows[q.name].name for q in a.params if q.ref is not None}
    writes = {e.entity if e.kind == "create" else rows[e.row].name for e in a.effects}
    created = [ents[e.entity] for e in a.effects if e.kind == "create"]
    outputs = _row_types(target).union(*(_row_types(c) for c in created))
    return Tool(a.name, "action", target.name, a.description, tuple(params), tuple(sorted(reads | writes)),
                tuple(sorted(writes)), outputs, action=a.name)


def build_tables(spec: DomainSpec, metadata: MetaData | None = None) -> dict[str, Table]:
    metadata = metadata or MetaData()
    ents = {e.name: e for e in spec.entities}
    sql_types = {"string": String(MAX_STRING_LEN), "enum": String(64), "int": Integer, "float": Float,
                 "money": Float, "bool": Boolean, "date": String(10), "datetime": String(19)}
    tables = {}
    for e in spec.entities:
        cols = [Column(e.key, String(MAX_KEY_LEN), primary_key=True)]
        cols += [Column(r.field, String(MAX_KEY_LEN), ForeignKey(f"{r.to}.{ents[r.to].key}"), nullable=not r.required,
                        index=True) for r in e.relations]
        cols += [Column(f.name, sql_types[f.type], nullable=False, unique=f.unique, index=f.searchable) for f in e.fields]
        tables[e.name] = Table(e.name, metadata, *cols)
    # "Now" is part of the database state (DESIGN.md section 3); entity names cannot start with "_".
    Table(CLOCK_TABLE, metadata, Column("now", String(19), primary_key=True))
    return tables


@dataclass
class CompiledDomain:
    spec: DomainSpec
    metadata: MetaData
    tables: dict[str, Table]
    tools: dict[str, Tool]
    graph: nx.DiGraph
    models: dict[str, type] = field(default_factory=dict)  # ORM classes over the same tables, for notebooks
    # SQL compiled once per domain and shared by every episode's engine (a fresh engine would recompile each
    # statement: the cache is per engine by default). Bounded: one entry per statement shape of the tools.
    sql_cache: dict[Any, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def create_schema(self, engine: Engine) -> None:
        """CREATE TABLE and CREATE INDEX in a fixed order (``metadata.create_all`` walks ``table.indexes``, a set,
        so index creation order - and with it the database file's bytes - changed from one compile to the next)."""
        with engine.begin() as conn:
            for table in self.metadata.sorted_tables:
                conn.execute(CreateTable(table))
                for index in sorted(table.indexes, key=lambda i: i.name or ""):
                    conn.execute(CreateIndex(index))

    def schemas(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        return [self.tools[n].schema() for n in (names if names is not None else self.tools)]

    def read_write_map(self) -> dict[str, dict[str, list[str]]]:
        return {t.name: {"reads": list(t.reads), "writes": list(t.writes)} for t in self.tools.values()}

    @property
    def density(self) -> float:
        return nx.density(self.graph)

    def writes(self) -> list[str]:
        return [n for n, t in self.tools.items() if t.is_write]


def dependency_graph(tools: list[Tool]) -> nx.DiGraph:
    """u -> v when an output field of u supplies a required parameter of v (edge attribute ``types``)."""
    g = nx.DiGraph()
    for t in tools:
        g.add_node(t.name, kind=t.kind, entity=t.entity)
    suppliers: dict[str, list[str]] = {}
    for t in tools:
        for s in t.outputs:
            suppliers.setdefault(s, []).append(t.name)
    for v in tools:
        for s in sorted(v.requires):
            for u in suppliers.get(s, []):
                if u != v.name:
                    if g.has_edge(u, v.name):
                        g.edges[u, v.name]["types"].append(s)
                    else:
                        g.add_edge(u, v.name, types=[s])
    return g


class CompileError(ValueError):
    pass


def compile_domain(spec: DomainSpec) -> CompiledDomain:
    tools = _read_tools(spec) + [_action_tool(spec, a.name) for a in spec.actions]
    names = [t.name for t in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    too_long = [n for n in names if len(n) > 64]
    if dupes or too_long:
        raise CompileError(f"domain {spec.name!r}: duplicate tool names {dupes} / names over 64 chars {too_long}; "
                           "rename the entity, field or action")
    metadata = MetaData()
    tables = build_tables(spec, metadata)

    class Base(DeclarativeBase):
        pass

    models = {n: type(n.title().replace("_", ""), (Base,), {"__table__": t}) for n, t in tables.items()}
    return CompiledDomain(spec, metadata, tables, {t.name: t for t in tools}, dependency_graph(tools), models)


@lru_cache(maxsize=64)
def compiled(name: str) -> CompiledDomain:
    """The compiled shipped domain ``name`` (cached per process)."""
    return compile_domain(load_domain(name))


def compiled_domains(frame: pl.DataFrame) -> dict[str, CompiledDomain]:
    """Every domain of a ``domain_graphs`` output, compiled again from its recorded spec."""
    return {row["domain"]: compile_domain(DomainSpec.model_validate_json(row["spec_json"]))
            for row in frame.iter_rows(named=True)}

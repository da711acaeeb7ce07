"""Declarative domain specifications: one YAML file per domain under ``envgen/domains/``.

A domain is the "high-level domain specification" the report's pipeline starts from (LongCat-Flash-Thinking-2601,
section 3.1.1, Domain Graph Construction). From it the compiler derives the database schema, every tool, the
OpenAI function schemas, the tool-to-table map and the dependency graph, so a tool is never written twice.

Shape of a spec (every key is documented by the ``description`` of the pydantic field below)::

    name: airline
    description: ...
    now: "2026-05-15T12:00:00"          # the database's "now"; nothing reads the clock
    entities:
      - name: reservation
        key: reservation_id             # primary key column (string id made of id_prefix + letters/digits)
        id_prefix: RES
        count: 40                       # rows seeded per environment
        fields:
          - {name: status, type: enum, values: [confirmed, cancelled], description: ...}
          - {name: total_price, type: money, min: 50, max: 3000, description: ...}
        relations:
          - {field: user_id, to: user, description: ...}   # a foreign key column to user.user_id
    actions:
      - name: cancel_reservation
        target: reservation            # the row the action transitions, passed as its key
        intent: "cancel my reservation"
        actor: customer                # who may request it: customer, staff or system
        words: [cancel]                # the words a person uses for it; the intent says one
        preconditions: [{field: status, op: eq, value: confirmed, message: ...}]
        effects: [{kind: set, field: status, value: cancelled}]
    policies:
      - {name: ..., text: ..., actions: [cancel_reservation], conditions: [...]}

Rows in conditions and effects are named ``target`` (the action's target row) or the name of a ``ref`` parameter
of the action (the row that parameter points at). Operands are exactly one of ``value`` (a literal), ``param``
(an action parameter), ``ref`` (``row.field``) or ``now`` (the database's now, plus ``days``); ``per`` multiplies a
number by an int parameter (a total of ``{ref: room_type_id.nightly_rate, per: nights}``).

``load_spec`` collects every problem of a file (structural and cross-reference) before failing, each with the
file, line and field, and returns a frozen, strict model.

Authoring checklist (``gymforge envgen check envgen/domains/NEW.yaml`` verifies all of it):

- Tools per domain = per entity 3 (get, list, search) + 1 per ``unique`` field + 1 per ``searchable`` field + 3 per
  relation (list_by, count_by, get_<entity>_<relation>) + the actions. 60+ needs about 7 entities, 8-10 relations,
  a few unique/searchable fields and 10+ actions.
- Give users something to identify themselves by: a ``unique`` field (email, code) or a ``searchable`` string
  (last name) on the entities tasks start from; enum fields are never asked of the user.
- Every numeric bound is enforced after each effect: a created or adjusted value must fit its field's min/max
  (a refund of a reservation's total needs ``refund.amount.max >= reservation.total_price.max``).
- Preconditions must be satisfiable by patching one field at a time (eq/ne/in/not_in on enums and bools,
  comparisons on numbers and dates, equality of a relation column); the constructor patches rows to make the
  golden call valid.
- ``intent`` is the user's voice; put task-stated parameters in it as ``{param}`` (a row parameter reads as the
  row's name, ``name_field``); ``label`` says how a user names a record or field ("reservation number"), and is what
  the simulated user answers to.
- ``actor``: staff decisions and back-office steps (approve, restock, dispatch) are ``staff``; customer tasks never
  ask for them. ``words``: no other action on the same entity may use one, so "withdraw" maps to one action.
- Mark what a customer cannot know ``internal: true`` (balances, staff codes); keys are always internal. A relation
  that may link another customer's row (a reviewer) is ``crossing: true``; every other path from a row to the
  customer entity must reach one customer (seeding keeps it so, writes that break it are refused).
"""

from __future__ import annotations

import hashlib
import keyword
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal, NamedTuple

import networkx as nx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from data_contracts.content import canonical_json

DOMAINS_DIR = Path(__file__).parent / "domains"

FieldType = Literal["string", "int", "float", "bool", "date", "datetime", "enum", "money"]
NUMERIC_TYPES = frozenset({"int", "float", "money"})
Op = Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "not_in"]
Actor = Literal["customer", "staff", "system"]
Scalar = str | int | float | bool

_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# Python keywords would break parameter models; "target" names the action's row in conditions. SQL keywords are
# fine: SQLAlchemy quotes them.
_RESERVED = frozenset(keyword.kwlist) | {"target"}


def _check_ident(value: str) -> str:
    if not _IDENT.match(value):
        raise ValueError(f"{value!r} is not an identifier: use lowercase letters, digits and _, start with a letter")
    if value in _RESERVED:
        raise ValueError(f"{value!r} is a reserved word; choose another name")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _ident_fields(*names: str):
    """A model validator checking that the named string fields (or lists of them) are identifiers."""

    def check(self: BaseModel) -> BaseModel:
        for name in names:
            value = getattr(self, name)
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if item is not None:
                    _check_ident(item)
        return self

    return model_validator(mode="after")(check)


class FieldSpec(_Strict):
    name: str = Field(description="Column name (lowercase identifier), unique within the entity.")
    type: FieldType = Field(description="Value type: string, int, float, bool, date, datetime, enum or money.")
    description: str = Field(description="What the field means; shown in tool descriptions.")
    faker: str | None = Field(
        default=None, description="Faker provider method that generates values (e.g. name, email, city)."
    )
    pattern: str | None = Field(
        default=None, description="Faker bothify pattern for strings: '#' a digit, '?' a letter (e.g. 'AA####')."
    )
    min: float | None = Field(default=None, description="Lower bound for numbers; day offset from now for dates.")
    max: float | None = Field(default=None, description="Upper bound for numbers; day offset from now for dates.")
    values: tuple[str, ...] = Field(default=(), description="Allowed values of an enum field (required for enum).")
    unique: bool = Field(default=False, description="Values are unique; adds a lookup_<entity>_by_<field> tool.")
    searchable: bool = Field(default=False, description="Adds a find_<plural>_by_<field> tool (exact match).")
    label: str | None = Field(default=None, description="How a user names this field ('email address').")
    internal: bool = Field(
        default=False, description="A value only staff or the system know (an internal code, a risk score, a "
        "running balance): a user never states it and a task never singles out a row by it.")

    _idents = _ident_fields("name")

    @model_validator(mode="after")
    def _typed_options(self) -> FieldSpec:
        if self.type == "enum" and not self.values:
            raise ValueError(f"enum field {self.name!r} needs `values` (the allowed values)")
        if self.type != "enum" and self.values:
            raise ValueError(f"field {self.name!r}: `values` is only for type enum")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"field {self.name!r}: min {self.min} is greater than max {self.max}")
        if (self.min is not None or self.max is not None) and self.type not in NUMERIC_TYPES | {"date", "datetime"}:
            raise ValueError(f"field {self.name!r}: min/max only apply to int, float, money, date, datetime")
        if self.pattern is not None and self.type != "string":
            raise ValueError(f"field {self.name!r}: `pattern` only applies to strings")
        return self


class RelationSpec(_Strict):
    field: str = Field(description="Foreign-key column added to this entity; holds the key of a `to` row.")
    to: str = Field(description="Name of the referenced (parent) entity.")
    description: str = Field(description="What the link means ('the user who owns the reservation').")
    required: bool = Field(default=True, description="NOT NULL; required relations must not form a cycle.")
    label: str | None = Field(default=None, description="How a user names the linked record ('origin airport').")
    crossing: bool = Field(
        default=False, description="The linked row may belong to another customer (a reviewer, a property for "
        "sale, a gift's recipient): ownership does not follow this link. Every other path from a row to the "
        "customer entity reaches the same customer.")

    _idents = _ident_fields("field", "to")


class EntitySpec(_Strict):
    name: str = Field(description="Entity (table) name, a lowercase identifier.")
    description: str = Field(description="What one row is.")
    key: str = Field(description="Primary-key column name (e.g. reservation_id); values are generated strings.")
    id_prefix: str = Field(pattern=r"^[A-Z]{1,4}$", description="Uppercase prefix of generated keys ('RES').")
    plural: str | None = Field(default=None, description="Plural used in tool names; default name + 's'.")
    count: int = Field(default=20, ge=2, le=1000, description="Rows seeded per environment.")
    fields: tuple[FieldSpec, ...] = Field(min_length=1, description="Typed columns besides key and relations.")
    relations: tuple[RelationSpec, ...] = Field(default=(), description="Foreign keys to other entities.")
    label: str | None = Field(default=None, description="How a user names this record ('booking').")

    _idents = _ident_fields("name", "key", "plural")

    @property
    def plural_name(self) -> str:
        return self.plural or f"{self.name}s"

    @property
    def column_names(self) -> list[str]:
        return [self.key, *(r.field for r in self.relations), *(f.name for f in self.fields)]

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)

    def relation(self, name: str) -> RelationSpec | None:
        return next((r for r in self.relations if r.field == name), None)


class Operand(_Strict):
    """Exactly one of value, param, ref, now."""

    value: Scalar | list[Scalar] | None = Field(default=None, description="A literal (a list for in/not_in).")
    param: str | None = Field(default=None, description="Name of an action parameter.")
    ref: str | None = Field(default=None, description="'row.field': a field of the target or of a ref param row.")
    now: bool = Field(default=False, description="The database's now (date or datetime as the field needs).")
    days: int = Field(default=0, description="Offset in days added to `now`.")
    per: str | None = Field(default=None, description="An integer action parameter the value is multiplied by: "
                            "a nightly rate per night booked, so a total is never one unit's price.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Operand:
        given = [k for k in ("value", "param", "ref") if getattr(self, k) is not None] + (["now"] if self.now else [])
        if len(given) != 1:
            raise ValueError(f"give exactly one of value, param, ref, now (got {given or 'none'})")
        if self.ref is not None and not re.match(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$", self.ref):
            raise ValueError(f"ref {self.ref!r} must look like 'row.field' (row = target or a ref parameter)")
        return self


class Condition(Operand):
    row: str = Field(
        default="target", description="Row the field belongs to: 'target', a ref parameter or a relation field of the target."
    )
    field: str = Field(description="Field of that row compared against the operand.")
    op: Op = Field(description="Comparison: eq, ne, lt, le, gt, ge, in, not_in.")
    message: str = Field(description="Error returned to the agent when the condition fails.")

    @model_validator(mode="after")
    def _list_ops(self) -> Condition:
        list_op = self.op in ("in", "not_in")
        if list_op != isinstance(self.value, list) and (list_op or self.value is not None):
            raise ValueError(f"op {self.op!r}: use a list value for in/not_in and a scalar otherwise")
        return self


class Effect(_Strict):
    kind: Literal["set", "adjust", "create"] = Field(
        description="set a field, adjust a numeric field by an amount, or create a row."
    )
    row: str = Field(default="target", description="Row changed by set/adjust (named as in Condition.row).")
    field: str | None = Field(default=None, description="Field changed by set/adjust.")
    to: Operand | None = Field(default=None, description="set: the new value; adjust: the amount added.")
    scale: float = Field(default=1.0, description="adjust: multiplier of the amount (-1 subtracts).")
    entity: str | None = Field(default=None, description="create: the entity of the new row.")
    values: dict[str, Operand] = Field(default_factory=dict, description="create: field -> operand; the rest seeded.")

    @model_validator(mode="after")
    def _shape(self) -> Effect:
        if self.kind == "create":
            if self.entity is None or not self.values or self.field is not None or self.to is not None:
                raise ValueError("create effects need `entity` and `values` (and no field/to)")
        elif self.field is None or self.to is None or self.entity is not None or self.values:
            raise ValueError(f"{self.kind} effects need `field` and `to` (and no entity/values)")
        return self


class ParamSpec(_Strict):
    name: str = Field(description="Parameter name (lowercase identifier).")
    description: str = Field(description="What the parameter means; shown in the tool schema.")
    type: FieldType | None = Field(default=None, description="Value type; omit when `ref` is given.")
    ref: str | None = Field(default=None, description="Entity whose key this parameter holds.")
    values: tuple[str, ...] = Field(default=(), description="Allowed values for an enum parameter.")
    min: float | None = Field(default=None, description="Lower bound for numeric parameters.")
    max: float | None = Field(default=None, description="Upper bound for numeric parameters.")
    source: Literal["task", "profile"] = Field(
        default="task", description="Where the user's golden value is stated: the task text or the user profile."
    )
    faker: str | None = Field(default=None, description="Faker provider for golden string values (else a pattern).")
    label: str | None = Field(default=None, description="How a user names this value ('new cabin class').")

    _idents = _ident_fields("name", "ref")

    @model_validator(mode="after")
    def _typed(self) -> ParamSpec:
        if (self.type is None) == (self.ref is None):
            raise ValueError(f"parameter {self.name!r}: give exactly one of `type` or `ref`")
        if (self.type == "enum") != bool(self.values):
            raise ValueError(f"parameter {self.name!r}: enum parameters (and only they) need `values`")
        return self


class ActionSpec(_Strict):
    name: str = Field(description="Tool name of the write action (lowercase identifier).")
    description: str = Field(description="What the action does; the tool description.")
    target: str = Field(description="Entity of the row the action transitions; its key is the first parameter.")
    intent: str = Field(description="The requester's phrase for task text, with {param} placeholders ('cancel my "
                        "trip'); a placeholder of a row parameter reads as that row's name (``name_field``).")
    actor: Actor = Field(description="Who may request the action: a customer (their own records), staff (an "
                         "employee's decision or back-office step: approve, restock, dispatch) or the system.")
    words: tuple[str, ...] = Field(min_length=1, description="The words a person uses for the action ('withdraw', "
                                   "'cancel'); the intent says one of them, and no other action on the same entity "
                                   "uses any of them, so a stated intent maps to this action alone.")
    params: tuple[ParamSpec, ...] = Field(default=(), description="Parameters besides the target key.")
    preconditions: tuple[Condition, ...] = Field(default=(), description="Checked before any effect; all must hold.")
    effects: tuple[Effect, ...] = Field(min_length=1, description="Applied in order inside one transaction.")

    _idents = _ident_fields("name", "target")


class PolicySpec(_Strict):
    name: str = Field(description="Policy name (lowercase identifier).")
    text: str = Field(description="The rule as stated to the agent in the system prompt.")
    actions: tuple[str, ...] = Field(min_length=1, description="Actions the rule constrains.")
    conditions: tuple[Condition, ...] = Field(min_length=1, description="What must hold when those actions run.")
    enforced: bool = Field(
        default=True,
        description="True: the tool refuses violating calls. False: the call goes through but the reward's "
        "`policy` component becomes 0 (the agent must follow the rule itself).",
    )

    _idents = _ident_fields("name", "actions")


class DomainSpec(_Strict):
    name: str = Field(description="Domain name; also the YAML file stem.")
    description: str = Field(description="What kind of system this is ('airline reservation system').")
    now: datetime = Field(description="The database's current time; tools compare against it, never the clock.")
    locale: str = Field(default="en_US", description="Faker locale used when seeding rows.")
    agent_instructions: str = Field(default="", description="Extra system-prompt text for the agent.")
    entities: tuple[EntitySpec, ...] = Field(min_length=1, description="Tables of the domain.")
    actions: tuple[ActionSpec, ...] = Field(min_length=1, description="Write tools (state transitions).")
    policies: tuple[PolicySpec, ...] = Field(default=(), description="Business rules and the conditions they imply.")
    customer: str | None = Field(default=None, description="The entity a task's user is (whose records they may "
                                 "change); default: the one entity with an email field.")

    _idents = _ident_fields("name")

    @field_validator("now", mode="before")
    @classmethod
    def _iso_now(cls, v: Any) -> Any:
        if not isinstance(v, (str, datetime)):
            # pydantic turns a ValueError (not a TypeError) into a validation problem
            raise ValueError("now must be an ISO date-time string such as '2026-05-15T12:00:00'")  # noqa: TRY004
        return v

    @field_validator("now")
    @classmethod
    def _naive_now(cls, v: datetime) -> datetime:
        if v.tzinfo is not None or v.microsecond:
            raise ValueError("now must be a local time to the second, without a time zone ('2026-05-15T12:00:00')")
        return v

    def entity(self, name: str) -> EntitySpec:
        return next(e for e in self.entities if e.name == name)

    def action(self, name: str) -> ActionSpec:
        return next(a for a in self.actions if a.name == name)

    @property
    def customer_entity(self) -> EntitySpec | None:
        """The entity a task's user is: ``customer`` where declared, else the one entity with an ``email`` field;
        None when neither names one."""
        if self.customer is not None:
            return self.entity(self.customer)
        emails = [e for e in self.entities if any(f.name == "email" for f in e.fields)]
        return emails[0] if len(emails) == 1 else None

    @property
    def spec_hash(self) -> str:
        """Stable hash of the parsed spec (key order and YAML formatting do not matter; an undeclared customer
        leaves the hash of a spec written before the field existed)."""
        dumped = self.model_dump(mode="json", exclude={"customer"} if self.customer is None else set())
        return hashlib.sha256(canonical_json(dumped).encode()).hexdigest()[:16]


class DomainSpecError(ValueError):
    """A domain spec is malformed; ``problems`` lists every problem found, each naming file, line and field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s) in domain spec:\n" + "\n".join(f"  - {p}" for p in problems))


# ----------------------------------------------------------------------------------------------------------------
# loading with every problem collected

# libyaml's loader where PyYAML was built with it: the same documents and lines, about nine times faster than the
# pure-Python loader (the 23 shipped specs: 0.2 s against 1.75 s), and every process that builds environments parses
# them. Its messages lack the pure-Python loader's quoted line and caret, so a refused document is parsed again by
# that one for its message.
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parsed(text: str, parse: Callable[..., Any]) -> Any:
    """``parse(text, Loader=...)`` (``yaml.load`` or ``yaml.compose``) with the fast loader; its error is the
    pure-Python loader's."""
    try:
        return parse(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return parse(text, Loader=yaml.SafeLoader)  # raises, with the line and a caret


def _line_map(text: str) -> dict[tuple[Any, ...], int]:
    """Map a path of keys/indices to its 1-based line, so errors can say where in the file they are."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                lines[(*path, k.value)] = k.start_mark.line + 1
                walk(v, (*path, k.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    try:
        root = _parsed(text, yaml.compose)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


class _Problems:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[str] = []

    @cached_property
    def lines(self) -> dict[tuple[Any, ...], int]:
        """Parsed again for the node lines only when a problem is reported: a sound spec is parsed once."""
        return _line_map(self.text)

    def line(self, path: Iterable[Any]) -> int | None:
        """The line of ``path``, or of its nearest ancestor the YAML has."""
        path = tuple(path)
        return next((self.lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in self.lines), None)

    def add(self, path: Iterable[Any], message: str) -> None:
        path = tuple(path)
        line = self.line(path)
        where = ".".join(str(p) for p in path) or "(root)"
        self.items.append(f"line {line}: {where}: {message}" if line else f"{where}: {message}")


def _message(err: Any) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    given = err.get("input")
    if err["type"] not in ("value_error", "missing") and isinstance(given, (str, int, float)) and len(str(given)) < 60:
        msg += f" (got {given!r})"
        if isinstance(given, bool):
            msg += "; YAML reads unquoted yes/no/on/off as booleans: quote the value"
    return msg


def _parse_items(raw: Any, key: str, model: type[BaseModel], problems: _Problems) -> list[tuple[int, Any]]:
    items = raw.get(key, []) if isinstance(raw, dict) else []
    if not isinstance(items, list):
        problems.add([key], "must be a list")
        return []
    parsed = []
    for i, item in enumerate(items):
        try:
            parsed.append((i, model.model_validate(item)))
        except ValidationError as exc:
            for err in exc.errors():
                problems.add([key, i, *err["loc"]], _message(err))
    return parsed


MAX_TOOL_NAME = 64  # the OpenAI function-calling limit on a function name


class ReadToolName(NamedTuple):
    name: str
    kind: str  # get, list, search, lookup, find, list_by, count_by, parent_of
    column: str | None  # lookup/find: the field; list_by/count_by/parent_of: the relation column
    path: tuple[Any, ...]  # where in the entity the tool comes from (for problem lines)


def read_tool_names(e: EntitySpec) -> list[ReadToolName]:
    """The read tools an entity compiles to, in compile order. The compiler names its tools from this list and the
    validator checks it, so a clash (entity ``vehicle_class`` vs relation ``vehicle.class_id``) is a spec problem
    with its line, not a compile error."""
    pl, here = e.plural_name, ("name",)
    out = [ReadToolName(f"get_{e.name}", "get", None, here), ReadToolName(f"list_{pl}", "list", None, here),
           ReadToolName(f"search_{pl}", "search", None, here)]
    for j, f in enumerate(e.fields):
        if f.unique:
            out.append(ReadToolName(f"lookup_{e.name}_by_{f.name}", "lookup", f.name, ("fields", j, "unique")))
        if f.searchable:
            out.append(ReadToolName(f"find_{pl}_by_{f.name}", "find", f.name, ("fields", j, "searchable")))
    for j, r in enumerate(e.relations):
        here = ("relations", j, "field")
        out += [ReadToolName(f"list_{pl}_by_{r.field}", "list_by", r.field, here),
                ReadToolName(f"count_{pl}_by_{r.field}", "count_by", r.field, here),
                ReadToolName(f"get_{e.name}_{r.field.removesuffix('_id')}", "parent_of", r.field, here)]
    return out


def _check_tool_names(entities: list[tuple[int, EntitySpec]], actions: list[tuple[int, ActionSpec]],
                      p: _Problems) -> None:
    """Every compiled tool needs its own name of at most MAX_TOOL_NAME characters."""
    claimed: dict[str, tuple[str, tuple[Any, ...]]] = {}
    seen_entities: set[str] = set()
    tools: list[tuple[str, str, tuple[Any, ...]]] = []
    for i, e in entities:
        if e.name not in seen_entities:  # a duplicate entity is reported as such
            seen_entities.add(e.name)
            tools += [(t.name, f"the {t.kind} tool of entity {e.name!r}", ("entities", i, *t.path))
                      for t in read_tool_names(e)]
    seen_actions: set[str] = set()
    for i, a in actions:
        if a.name not in seen_actions:  # a duplicate action is reported as such
            seen_actions.add(a.name)
            tools.append((a.name, f"action {a.name!r}", ("actions", i, "name")))
    for name, what, path in tools:
        if len(name) > MAX_TOOL_NAME:
            p.add(path, f"tool name {name!r} ({what}) is over {MAX_TOOL_NAME} characters; use a shorter name")
        if name in claimed:
            other, other_path = claimed[name]
            line = p.line(other_path)
            p.add(path, f"tool name {name!r} ({what}) clashes with {other}"
                        f"{f' (line {line})' if line else ''}; rename the entity, field, relation or action")
        else:
            claimed[name] = (what, path)


def says(text: str, word: str) -> bool:
    """Whether ``text`` contains ``word`` (a word or phrase) as whole words, ignoring case ("approve" is not said
    by "approved")."""
    return re.search(rf"(?<![\w-]){re.escape(word.lower())}(?![\w-])", text.lower()) is not None


def customer_facing(spec: DomainSpec, entity: str, column: str) -> bool:
    """Whether a customer knows the values of ``entity.column``: a field not marked ``internal`` (a name, an email,
    a confirmation code, a date, an amount); keys and relation columns are internal keys the agent finds."""
    field = spec.entity(entity).field(column)
    return field is not None and not field.internal


def name_field(entity: EntitySpec) -> FieldSpec | None:
    """The field a person names a row of ``entity`` by (a flight number, a room number, a vet's name): its first
    unique field a customer knows, else its first searchable one; None when a person has no name for it."""
    known = [f for f in entity.fields if not f.internal]
    return next((f for f in known if f.unique), next((f for f in known if f.searchable), None))


def action_rows(action: ActionSpec, entities: dict[str, EntitySpec]) -> dict[str, EntitySpec]:
    """Rows an action's conditions and effects may name: ``target``, each ``ref`` parameter, and each relation
    field of the target (the row it points at, e.g. ``flight_id`` on a reservation)."""
    rows = {"target": entities[action.target]}
    rows |= {r.field: entities[r.to] for r in entities[action.target].relations if r.to in entities}
    rows |= {q.name: entities[q.ref] for q in action.params if q.ref in entities}
    return rows


def _unparsed_rows(action: ActionSpec, parsed: dict[str, EntitySpec], named: set[Any]) -> frozenset[str]:
    """Rows of an action whose entity exists but failed to parse: its problems are listed already."""
    target = parsed.get(action.target)
    rels = [(r.field, r.to) for r in target.relations] if target else []
    refs = [(q.name, q.ref) for q in action.params if q.ref is not None]
    return frozenset(row for row, ent in rels + refs if ent not in parsed and ent in named)


def _check_conditions(
    conds: Iterable[tuple[list[Any], Condition]], rows: dict[str, EntitySpec], params: dict[str, ParamSpec], p: _Problems,
    skip: frozenset[str] = frozenset(),
) -> None:
    for path, c in conds:
        check_operand(path, c, rows, params, p, skip)
        ent = rows.get(c.row)
        if c.row in skip:
            continue
        if ent is None:
            p.add([*path, "row"], f"unknown row {c.row!r}; use one of {sorted(rows)}")
        elif c.field not in ent.column_names:
            p.add([*path, "field"], f"{ent.name} has no field {c.field!r}; fields: {ent.column_names}")
        elif (f := ent.field(c.field)) is not None and f.type == "enum" and c.value is not None:
            for v in c.value if isinstance(c.value, list) else [c.value]:
                if v not in f.values:
                    p.add([*path, "value"], f"{v!r} is not a value of {ent.name}.{f.name}; allowed: {list(f.values)}")


def _numeric_operand(o: Operand, rows: dict[str, EntitySpec], params: dict[str, ParamSpec]) -> bool:
    if o.now:
        return False
    if o.value is not None:
        return isinstance(o.value, (int, float)) and not isinstance(o.value, bool)
    if o.param is not None:
        return o.param not in params or params[o.param].type in NUMERIC_TYPES
    row, column = (o.ref or ".").split(".")
    f = rows[row].field(column) if row in rows else None
    return f is None or f.type in NUMERIC_TYPES


def check_operand(
    path: list[Any], o: Operand, rows: dict[str, EntitySpec], params: dict[str, ParamSpec], p: _Problems,
    skip: frozenset[str] = frozenset(),
) -> None:
    """``skip``: rows whose entity failed to parse (already reported), so no cascade of 'unknown row' errors."""
    if o.param is not None and o.param not in params:
        p.add([*path, "param"], f"unknown parameter {o.param!r}; parameters: {sorted(params)}")
    if o.per is not None and (o.per not in params or params[o.per].type != "int"):
        p.add([*path, "per"], f"per {o.per!r} must name an int parameter; parameters: {sorted(params)}")
    if o.ref is not None:
        row, field = o.ref.split(".")
        if row in skip:
            pass
        elif row not in rows:
            p.add([*path, "ref"], f"unknown row {row!r}; use one of {sorted(rows)}")
        elif field not in rows[row].column_names:
            p.add([*path, "ref"], f"{rows[row].name} has no field {field!r}")


def _check_domain(raw: Any, p: _Problems) -> None:
    """Cross-reference checks; items that failed to parse are skipped (their problems are already listed)."""
    entities = _parse_items(raw, "entities", EntitySpec, p)
    actions = _parse_items(raw, "actions", ActionSpec, p)
    policies = _parse_items(raw, "policies", PolicySpec, p)
    raw = raw if isinstance(raw, dict) else {}
    raw_names = {key: {item.get("name") for item in (raw.get(key) or []) if isinstance(item, dict)}
                 for key in ("entities", "actions")}
    by_name = _check_entities(entities, str(raw.get("locale", "en_US")), p)
    _check_relations(raw.get("entities") or [], raw_names["entities"], p)
    seen_actions: set[str] = set()
    for i, a in actions:
        if a.name in seen_actions:
            p.add(["actions", i, "name"], f"duplicate action {a.name!r}")
        seen_actions.add(a.name)
        _check_action(["actions", i], a, by_name, raw_names["entities"], p)
    _check_tool_names(entities, actions, p)
    _check_words(actions, p)
    _check_policies(policies, {a.name: a for _, a in actions}, by_name, raw_names, p)
    customer = raw.get("customer")
    if customer is not None and customer not in raw_names["entities"]:
        p.add(["customer"], f"unknown entity {customer!r}; entities: {sorted(n for n in raw_names['entities'] if n)}")


def _check_words(actions: list[tuple[int, ActionSpec]], p: _Problems) -> None:
    """A stated intent maps to one action: no other action on the same entity claims a word its intent says."""
    for i, a in actions:
        for _, other in actions:
            if other.name != a.name and other.target == a.target:
                said = [w for w in other.words if says(a.intent, w)]
                if said:
                    p.add(["actions", i, "intent"], f"the intent {a.intent!r} says {said[0]!r}, a word of "
                                                    f"{other.name} on the same {a.target}; reword one of them")


def _check_entities(entities: list[tuple[int, EntitySpec]], locale: str, p: _Problems) -> dict[str, EntitySpec]:
    """Unique entity names, columns and id prefixes, known Faker providers; returns the entities by name."""
    try:
        fake = faker_for(locale)
    except (AttributeError, ValueError):
        p.add(["locale"], f"unknown Faker locale {locale!r} (e.g. en_US, en_GB, de_DE)")
        fake = faker_for("en_US")
    by_name: dict[str, EntitySpec] = {}
    prefixes: dict[str, str] = {}
    for i, e in entities:
        if e.name in by_name:
            p.add(["entities", i, "name"], f"duplicate entity {e.name!r}")
        by_name[e.name] = e
        seen: set[str] = set()
        for col in e.column_names:
            if col in seen:
                p.add(["entities", i], f"duplicate column {col!r} in entity {e.name!r}")
            seen.add(col)
        for j, f in enumerate(e.fields):
            if f.faker is not None and (f.faker.startswith("_") or not callable(getattr(fake, f.faker, None))):
                p.add(["entities", i, "fields", j, "faker"], f"unknown Faker provider {f.faker!r}")
    for i, e in entities:
        if e.id_prefix in prefixes and prefixes[e.id_prefix] != e.name:
            p.add(["entities", i, "id_prefix"], f"id_prefix {e.id_prefix!r} already used by {prefixes[e.id_prefix]!r}")
        prefixes[e.id_prefix] = e.name
    return by_name


def _check_relations(raw_entities: list[Any], entity_names: set[str], p: _Problems) -> None:
    """Relations point at entities and required ones form no cycle. Checked on the raw items, so an entity with
    another problem still gets these checked too."""
    graph = nx.DiGraph()
    for i, item in enumerate(raw_entities):
        rels = item.get("relations") if isinstance(item, dict) else None
        for j, r in enumerate(rels if isinstance(rels, list) else []):
            if not isinstance(r, dict) or not isinstance(r.get("to"), str):
                continue
            if r["to"] not in entity_names:
                p.add(["entities", i, "relations", j, "to"], f"dangling relation: no entity {r['to']!r}")
            elif r.get("required", True) is not False and isinstance(item.get("name"), str):
                graph.add_edge(item["name"], r["to"])
    for cycle in nx.simple_cycles(graph):
        p.add(["entities"], f"cyclic required relations {' -> '.join([*cycle, cycle[0]])}; make one optional")


def _check_action(path: list[Any], a: ActionSpec, by_name: dict[str, EntitySpec], entity_names: set[str],
                  p: _Problems) -> None:
    """An action's target, parameters, intent placeholders, preconditions and effects."""
    if a.target not in by_name:
        if a.target not in entity_names:
            p.add([*path, "target"], f"unknown entity {a.target!r}; entities: {sorted(by_name)}")
        return
    params = {q.name: q for q in a.params}
    if len(params) != len(a.params) or by_name[a.target].key in params:
        p.add([*path, "params"], "duplicate parameter names (or one named like the target key)")
    rows = action_rows(a, by_name)
    skip = _unparsed_rows(a, by_name, entity_names)
    for j, q in enumerate(a.params):
        if q.ref is not None and q.ref not in by_name and q.ref not in entity_names:
            p.add([*path, "params", j, "ref"], f"unknown entity {q.ref!r}")
    for placeholder in re.findall(r"{(\w+)}", a.intent):
        if placeholder not in params:
            p.add([*path, "intent"], f"placeholder {{{placeholder}}} is not a parameter")
        elif (ref := params[placeholder].ref) in by_name and name_field(by_name[ref]) is None:
            p.add([*path, "intent"], f"placeholder {{{placeholder}}} names a {ref}, which has no name a person "
                                     "knows: mark a unique or searchable field of it that is not internal")
    for j, word in enumerate(a.words):
        if word != word.strip().lower() or not word:
            p.add([*path, "words", j], f"{word!r}: words are lowercase, without outer spaces")
    if not any(says(a.intent, w) for w in a.words):
        p.add([*path, "words"], f"the intent {a.intent!r} says none of the words {list(a.words)}")
    _check_conditions([([*path, "preconditions", j], c) for j, c in enumerate(a.preconditions)], rows, params, p,
                      skip)
    for j, eff in enumerate(a.effects):
        _check_effect([*path, "effects", j], eff, rows, params, by_name, entity_names, p, skip)


def _check_effect(epath: list[Any], eff: Any, rows: dict[str, EntitySpec], params: dict[str, Any],
                  by_name: dict[str, EntitySpec], entity_names: set[str], p: _Problems, skip: set[str]) -> None:
    if eff.kind == "create":
        if eff.entity not in by_name:
            if eff.entity not in entity_names:
                p.add([*epath, "entity"], f"unknown entity {eff.entity!r}")
            return
        target = by_name[eff.entity]
        for col, operand in eff.values.items():
            if col not in target.column_names or col == target.key:
                p.add([*epath, "values", col], f"{target.name} has no settable field {col!r}")
            check_operand([*epath, "values", col], operand, rows, params, p, skip)
        unset = [r.field for r in target.relations if r.required and r.field not in eff.values]
        if unset:
            p.add([*epath, "values"], f"required relation(s) {unset} of {target.name} need a value")
        return
    ent = rows.get(eff.row)
    if ent is None:
        if eff.row not in skip:
            p.add([*epath, "row"], f"unknown row {eff.row!r}; use one of {sorted(rows)}")
        return
    check_operand([*epath, "to"], eff.to, rows, params, p, skip)
    fspec = ent.field(eff.field)
    if eff.field == ent.key or eff.field not in ent.column_names:
        p.add([*epath, "field"], f"{ent.name} has no settable field {eff.field!r} (keys cannot change)")
    elif fspec is None:  # a relation column: only `set` makes sense
        if eff.kind != "set":
            p.add([*epath, "kind"], f"{ent.name}.{eff.field} is a relation; only `set` applies")
    elif eff.kind == "adjust" and fspec.type not in NUMERIC_TYPES:
        p.add([*epath, "field"], f"adjust needs a numeric field; {ent.name}.{fspec.name} is {fspec.type}")
    elif eff.kind == "adjust" and not _numeric_operand(eff.to, rows, params):
        p.add([*epath, "to"], "adjust needs a numeric amount (a number, a numeric parameter or field)")
    elif fspec.type == "enum" and eff.to.value is not None and eff.to.value not in fspec.values:
        p.add([*epath, "to"], f"{eff.to.value!r} is not a value of {ent.name}.{fspec.name}")


def _check_policies(policies: list[tuple[int, PolicySpec]], action_map: dict[str, ActionSpec],
                    by_name: dict[str, EntitySpec], raw_names: dict[str, set[Any]], p: _Problems) -> None:
    """A policy names known actions, and its conditions read the rows and parameters of each."""
    for i, pol in policies:
        for j, name in enumerate(pol.actions):
            a = action_map.get(name)
            if a is None:
                if name not in raw_names["actions"]:
                    p.add(["policies", i, "actions", j], f"unknown action {name!r}")
                continue
            if a.target not in by_name:
                continue
            _check_conditions(
                [(["policies", i, "conditions", k], c) for k, c in enumerate(pol.conditions)],
                action_rows(a, by_name), {q.name: q for q in a.params}, p,
                _unparsed_rows(a, by_name, raw_names["entities"]),
            )


@lru_cache(maxsize=16)
def faker_for(locale: str):
    """One Faker per locale per process (building one costs ~60 ms); callers reseed it with seed_instance."""
    from faker import Faker

    return Faker(locale)


def parse_domain_spec(text: str, source: str = "<string>") -> DomainSpec:
    """Parse YAML text into a DomainSpec, listing every problem in one DomainSpecError."""
    try:
        raw = _parsed(text, yaml.load)
    except yaml.YAMLError as exc:
        raise DomainSpecError(source, [f"not valid YAML: {exc}"]) from None
    problems = _Problems(text)
    if not isinstance(raw, dict):
        raise DomainSpecError(source, ["the top level must be a mapping with name, description, now, entities, actions"])
    try:
        spec = DomainSpec.model_validate(raw)
    except ValidationError as exc:
        spec = None
        # Entities/actions/policies are re-parsed item by item below, so skip their structural errors here.
        for err in exc.errors():
            if err["loc"] and err["loc"][0] in ("entities", "actions", "policies") and len(err["loc"]) > 1:
                continue
            problems.add(err["loc"], _message(err))
    _check_domain(raw, problems)
    if problems.items:
        raise DomainSpecError(source, problems.items)
    assert spec is not None  # every structural error was reported above
    return spec


def load_spec(path: str | Path) -> DomainSpec:
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problem = f"line {line}: not UTF-8 text ({exc.reason} at byte {exc.start + 1}); save it as UTF-8"
        raise DomainSpecError(str(path), [problem]) from None
    spec = parse_domain_spec(text, str(path))
    if spec.name != path.stem:
        raise DomainSpecError(str(path), [f"line 1: name: {spec.name!r} must equal the file stem {path.stem!r}"])
    return spec


def domain_paths(domains_dir: Path = DOMAINS_DIR) -> dict[str, Path]:
    """Every shipped domain, one YAML file each, discovered by glob."""
    return {p.stem: p for p in sorted(domains_dir.glob("*.yaml"))}


def load_domain(name: str) -> DomainSpec:
    paths = domain_paths()
    if name not in paths:
        raise ValueError(f"unknown domain {name!r}; shipped domains: {', '.join(paths)}")
    stat = paths[name].stat()
    return _load_spec_as_of(paths[name], stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _load_spec_as_of(path: Path, mtime_ns: int, size: int) -> DomainSpec:
    """Parsed once per file version: a long-lived worker sees a spec edited in place, as the artifact key does."""
    return load_spec(path)


def resolve_domains(selection: str | Iterable[str]) -> list[str]:
    """'all', 'a,b' or a list -> domain names, each checked to exist."""
    names = list(domain_paths()) if selection == "all" else (
        [s.strip() for s in selection.split(",") if s.strip()] if isinstance(selection, str) else list(selection)
    )
    unknown = [n for n in names if n not in domain_paths()]
    if unknown:
        raise ValueError(f"unknown domain(s) {unknown}; shipped domains: {', '.join(domain_paths())}")
    return names


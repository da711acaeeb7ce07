"""The Record machinery: a record format documents every column an artifact holds, and the stage that emits it builds its
output contract from it. Records are declared beside the branch that uses them (``tasks/<branch>/records.py``,
``training/records.py``, or in the one module of a lower room that builds their rows); this module declares none.

A stage's output contract is built from the record it emits plus the rules of its own procedure::

    OUTPUTS = {"keychain": KEYCHAIN.contract(expectations=(matches("first_key", KEY_REGEX),), checks=(...))}

and the gate holds every output to its record exactly: a missing column, a column of another dtype or a column the
record does not declare fails the contract (so an output never drifts from its schema unnoticed). Nested values are
JSON strings (``JSON``); lists of scalars are polars lists (``STRINGS``). ``gymforge artifacts schema`` prints them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl

from data_contracts.stage import Check, Contract, Expect, Severity

JSON = pl.String()
"""A nested value serialized as JSON text."""

STRINGS = pl.List(pl.String)

JsonKind = Literal["list", "object", "any"]


@dataclass(frozen=True)
class Column:
    dtype: pl.DataType
    doc: str


def col(dtype: pl.DataType | type[pl.DataType], doc: str) -> Column:
    return Column(dtype() if isinstance(dtype, type) else dtype, doc)


# --- building blocks of contracts --------------------------------------------------------------------------------


def not_null(*columns: str, severity: Severity = "critical") -> tuple[Expect, ...]:
    return tuple(Expect("ExpectColumnValuesToNotBeNull", severity=severity, column=c) for c in columns)


def unique(*columns: str, severity: Severity = "critical") -> Expect:
    """One column unique, or several unique together."""
    if len(columns) == 1:
        return Expect("ExpectColumnValuesToBeUnique", severity=severity, column=columns[0])
    return Expect("ExpectCompoundColumnsToBeUnique", severity=severity, column_list=list(columns))


def in_set(column: str, values: Sequence[Any], severity: Severity = "critical") -> Expect:
    return Expect("ExpectColumnValuesToBeInSet", severity=severity, column=column, value_set=list(values))


def between(column: str, min_value: float | None = None, max_value: float | None = None,
            severity: Severity = "critical") -> Expect:
    return Expect("ExpectColumnValuesToBeBetween", severity=severity, column=column,
                  min_value=min_value, max_value=max_value)


def matches(column: str, regex: str, severity: Severity = "critical") -> Expect:
    return Expect("ExpectColumnValuesToMatchRegex", severity=severity, column=column, regex=regex)


def at_most(column: str, bound: str) -> Expect:
    """``column <= bound`` row by row (a prompt's tokens within its target)."""
    return Expect("ExpectColumnPairValuesAToBeGreaterThanB", column_A=bound, column_B=column, or_equal=True)


def min_length(column: str, chars: int) -> Expect:
    return Expect("ExpectColumnValueLengthsToBeBetween", column=column, min_value=chars)


def json_check(column: str, kind: JsonKind = "any", *, required_keys: Sequence[str] = (), nullable: bool = False,
               severity: Severity = "critical") -> Check:
    """Rows whose ``column`` is not JSON of the given kind fail; for ``object`` (or a ``list`` of objects) every
    object must carry ``required_keys``."""
    keys = tuple(required_keys)

    def bad(value: str | None) -> bool:
        if value is None:
            return not nullable
        try:
            parsed = json.loads(value)
        except ValueError:
            return True
        if kind == "list":
            return not isinstance(parsed, list) or bool(keys) and not all(
                isinstance(item, dict) and all(k in item for k in keys) for item in parsed)
        if kind == "object":
            return not isinstance(parsed, dict) or not all(k in parsed for k in keys)
        return False

    def fn(frame: pl.DataFrame) -> list[bool]:
        return [bad(v) for v in frame[column].to_list()]

    shape = {"list": "a JSON list", "object": "a JSON object", "any": "valid JSON"}[kind]
    description = f"{column} is {shape}" + (f" with keys {list(keys)}" if keys else "")
    return Check(f"{column}_json", fn, severity=severity, description=description)


# --- records -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A record format: documented columns, the key that identifies a row, and the rules every output of it obeys
    (the key unique and not null, ``required`` columns not null, ``json`` columns parseable)."""

    name: str
    doc: str
    columns: Mapping[str, Column]
    key: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    json: Mapping[str, JsonKind] = field(default_factory=dict)

    @property
    def schema(self) -> dict[str, pl.DataType]:
        return {name: column.dtype for name, column in self.columns.items()}

    def contract(self, *, expectations: Iterable[Expect] = (), checks: Iterable[Check] = (),
                 min_rows: int = 0) -> Contract:
        base = [*not_null(*self.key, *self.required)] + ([unique(*self.key)] if self.key else [])
        return Contract(
            columns=self.schema, record=self.name, min_rows=min_rows,
            expectations=(*base, *expectations),
            checks=(*(json_check(c, kind) for c, kind in self.json.items()), *checks),
        )

    def extend(self, name: str, doc: str, columns: Mapping[str, Column], *, key: tuple[str, ...] | None = None,
               json: Mapping[str, JsonKind] | None = None) -> Record:
        """This record plus ``columns`` (a filter adding pass counts, an evaluation set adding its run)."""
        return Record(name, doc, {**self.columns, **columns}, self.key if key is None else key, self.required,
                      {**self.json, **(json or {})})

    def rejected(self, reason: str = "why the row was dropped") -> Record:
        """The record of rows a stage dropped on purpose: every column of this one plus ``reason``."""
        return self.extend(f"{self.name}_rejected", f"{self.doc} Dropped rows, each with its reason.",
                           {"reason": col(pl.String, reason)}, key=())

    def frame(self, rows: Sequence[Mapping[str, Any]] = ()) -> pl.DataFrame:
        """A frame of this record from row dicts (an empty one keeps every column and dtype)."""
        return pl.DataFrame(list(rows), schema=self.schema, orient="row") if rows else pl.DataFrame(schema=self.schema)


def cols(**columns: tuple[pl.DataType | type[pl.DataType], str] | Column) -> dict[str, Column]:
    """Columns by name, each a ``(dtype, doc)`` pair or a ``Column`` taken from another record."""
    return {name: c if isinstance(c, Column) else col(*c) for name, c in columns.items()}

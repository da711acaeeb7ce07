"""Record formats of DESIGN.md section 6 as polars column maps, and the building blocks of their contracts.

A room imports the column map of the record it emits and extends the base contract with its own rules::

    from data_contracts.schemas import KEYCHAIN_COLUMNS, KEYCHAIN_CONTRACT, extend, in_set
    CONTRACT = extend(KEYCHAIN_CONTRACT, expectations=(in_set("key_format", ["uuid", "hex32"]),))

Nested values are JSON strings (``JSON``); a list of strings is a polars ``List(String)`` where that is natural.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import polars as pl

from data_contracts.stage import Check, Contract, Expect, Severity

JSON = pl.String()
"""A nested value serialized as JSON text."""

JsonKind = Literal["list", "object", "any"]


# --- building blocks --------------------------------------------------------------------------------------------


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


def extend(
    base: Contract,
    *,
    columns: Mapping[str, pl.DataType | type[pl.DataType]] | None = None,
    expectations: Sequence[Expect] = (),
    checks: Sequence[Check] = (),
    min_rows: int | None = None,
) -> Contract:
    """``base`` plus more columns, expectations and checks (a stage adding pass counts to a record, say)."""
    return replace(
        base,
        columns={**base.columns, **(columns or {})},
        expectations=(*base.expectations, *expectations),
        checks=(*base.checks, *checks),
        min_rows=base.min_rows if min_rows is None else min_rows,
    )


def record_contract(
    columns: Mapping[str, pl.DataType | type[pl.DataType]],
    *,
    key: str | Sequence[str],
    required: Sequence[str] = (),
    json_columns: Mapping[str, JsonKind] | None = None,
) -> Contract:
    """Columns and dtypes, a unique non-null key, non-null ``required`` columns, parseable JSON columns."""
    key_columns = (key,) if isinstance(key, str) else tuple(key)
    return Contract(
        columns=dict(columns),
        expectations=(*not_null(*key_columns, *required), unique(*key_columns)),
        checks=tuple(json_check(c, kind) for c, kind in (json_columns or {}).items()),
    )


# --- DESIGN.md section 6 ----------------------------------------------------------------------------------------

QA_SOURCES = ("hotpotqa", "musique", "2wiki", "world")
SPLITS = ("train", "eval")

QA_SEED_COLUMNS: dict[str, pl.DataType] = {
    "id": pl.String(),
    "source": pl.String(),
    "question": pl.String(),
    "answer": pl.String(),
    "aliases": pl.List(pl.String()),
    "docs": JSON,  # list of {title, text, is_supporting}
    "hops": pl.Int64(),
    "type": pl.String(),
    "split": pl.String(),
}
QA_SEED_CONTRACT = extend(
    record_contract(QA_SEED_COLUMNS, key="id", required=("question", "answer", "docs")),
    expectations=(in_set("source", QA_SOURCES), in_set("split", SPLITS)),
    checks=(json_check("docs", "list", required_keys=("title", "text", "is_supporting")),),
)

PASS_COLUMNS: dict[str, pl.DataType] = {"pass_count": pl.Int64(), "pass_k": pl.Int64()}

KEYCHAIN_COLUMNS: dict[str, pl.DataType] = {
    "id": pl.String(),
    "seed_id": pl.String(),
    "prompt": JSON,  # chat messages
    "answer": pl.String(),
    "aliases": pl.List(pl.String()),
    "hidden_question": pl.String(),
    "chain": pl.List(pl.String()),  # ordered keys, start key first
    "distractor_chains": JSON,  # list of key lists
    "key_format": pl.String(),
    "hops": pl.Int64(),
    "n_distractor_chains": pl.Int64(),
    "target_tokens": pl.Int64(),
    "tokens": pl.Int64(),
    "tokenizer": pl.String(),
    "gold_doc_positions": pl.List(pl.Int64()),
    **PASS_COLUMNS,
    "curriculum_stage": pl.Int64(),
}
KEYCHAIN_CONTRACT = record_contract(
    KEYCHAIN_COLUMNS, key="id", required=("seed_id", "prompt", "answer", "hidden_question", "chain", "tokens"),
    json_columns={"prompt": "list", "distractor_chains": "list"},
)

ENVIRONMENT_COLUMNS: dict[str, pl.DataType] = {
    "env_id": pl.String(),
    "domain": pl.String(),
    "tools": JSON,  # OpenAI function schemas
    "edges": JSON,  # tool dependency graph edges
    "golden_chains": JSON,
    "nodes": pl.Int64(),
    "density": pl.Float64(),
    "chains": pl.Int64(),
    "fallback_used": pl.Boolean(),
    "db_path": pl.String(),
    "seed": pl.Int64(),
}
ENVIRONMENT_CONTRACT = record_contract(
    ENVIRONMENT_COLUMNS, key="env_id", required=("domain", "tools", "db_path"),
    json_columns={"tools": "list", "edges": "list", "golden_chains": "list"},
)

TASK_COLUMNS: dict[str, pl.DataType] = {
    "task_id": pl.String(),
    "env_id": pl.String(),
    "description": pl.String(),
    "user_profile": JSON,
    "rubric": JSON,  # expected canonical DB diff + required outputs
    "golden_actions": JSON,
    "difficulty": JSON,  # difficulty features
    "noise": JSON,  # level, transforms applied (envgen/noise/records.py); null for a clean task
}
TASK_CONTRACT = extend(
    record_contract(
        TASK_COLUMNS, key="task_id", required=("env_id", "description", "rubric", "golden_actions"),
        json_columns={"user_profile": "object", "rubric": "object", "golden_actions": "list"},
    ),
    checks=(json_check("noise", "object", nullable=True),),
)

FAILURE_LABELS = ("agent", "user", "tool")
TRAJECTORY_COLUMNS: dict[str, pl.DataType] = {
    "id": pl.String(),
    "source": pl.String(),
    "env_id": pl.String(),
    "task_id": pl.String(),
    "example_id": pl.String(),
    "messages": JSON,  # OpenAI format with tool_calls
    "segments": JSON,  # token ids, logprobs, policy version, loss mask per segment
    "reward_components": JSON,
    "verified": pl.Boolean(),
    "failure_label": pl.String(),  # agent | user | tool, null when the episode succeeded
}
TRAJECTORY_CONTRACT = extend(
    record_contract(TRAJECTORY_COLUMNS, key="id", required=("source", "messages", "segments"),
                    json_columns={"messages": "list", "segments": "list", "reward_components": "object"}),
    expectations=(in_set("failure_label", FAILURE_LABELS),),  # GX's in-set ignores nulls
)

RECORDS: dict[str, Contract] = {
    "qa_seed": QA_SEED_CONTRACT,
    "keychain": KEYCHAIN_CONTRACT,
    "environment": ENVIRONMENT_CONTRACT,
    "task": TASK_CONTRACT,
    "trajectory": TRAJECTORY_CONTRACT,
}
"""Every section-6 record's base contract by name."""

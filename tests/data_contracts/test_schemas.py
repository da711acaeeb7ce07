"""Record formats are the one source of every output's columns: each column documented, each stage output built from
a record, and an output that drifts from its record (a column missing, retyped or undeclared) fails its contract."""

from __future__ import annotations

import datetime
import json
import sys
import types

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_contracts.gate import check_contract, validate
from data_contracts.schemas import json_check
from data_contracts.stage import REJECTED, StageError
from flows.registry import discover, records

RECORDS = records()

_PLAIN = {pl.String: "x", pl.Int64: 1, pl.Float64: 0.5, pl.Boolean: True, pl.Binary: b"x",
          pl.Date: datetime.date(2000, 1, 1)}
_JSON = {"list": "[]", "object": "{}", "any": "null"}


def _row(record) -> dict:
    """One row of plain values for every column of the record, valid JSON where the record parses it."""
    row = {}
    for name, column in record.columns.items():
        dtype = column.dtype
        row[name] = [_PLAIN[dtype.inner.base_type()]] if isinstance(dtype, pl.List) else _PLAIN[dtype.base_type()]
    return row | {name: _JSON[kind] for name, kind in record.json.items()}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_record_documents_its_columns_and_holds_outputs_to_them(name: str) -> None:
    record = RECORDS[name]
    assert record.doc and all(column.doc for column in record.columns.values())
    contract = record.contract()
    check_contract(contract)
    good = pl.DataFrame([_row(record)], schema=record.schema)
    assert validate(name, "o", good, contract, "p0").passed

    def schema_failure(frame: pl.DataFrame) -> str:
        report = validate(name, "o", frame, contract, "p0")
        assert not report.passed
        return report.failures()[0].message

    first = next(iter(record.columns))
    assert "not in record" in schema_failure(good.with_columns(pl.lit(1).alias("undeclared")))
    assert "missing column" in schema_failure(good.drop(first))
    retyped = pl.Int8 if record.schema[first] != pl.Int8 else pl.String
    assert "expected" in schema_failure(good.with_columns(pl.col(first).cast(pl.String).cast(retyped, strict=False)))
    if record.key:
        doubled = validate(name, "o", pl.concat([good, good]), contract, "p0")
        assert not doubled.passed and any("Unique" in f.name for f in doubled.failures())
    for column in record.json:
        spoiled = validate(name, "o", good.with_columns(pl.lit("{oops").alias(column)), contract, "p0")
        assert not spoiled.passed and f"{column}_json" in [f.name for f in spoiled.failures()]


def test_every_stage_output_is_built_from_a_record() -> None:
    for stage in discover().values():
        if stage.name.startswith("test_double_"):
            continue
        for output, contract in stage.outputs.items():
            assert contract.record in RECORDS, f"{stage.name}.{output} declares no record"
            assert dict(contract.columns) == RECORDS[contract.record].schema
        assert REJECTED not in stage.outputs or stage.outputs[REJECTED].record is not None


def test_rejected_and_extended_records_keep_their_columns() -> None:
    seed = RECORDS["qa_seed"]
    rejected = seed.rejected()
    assert list(rejected.columns) == [*seed.columns, "reason"] and rejected.key == ()
    filtered = RECORDS["filtered_seed"]
    assert set(filtered.columns) == set(seed.columns) | {"pass_count", "pass_k", "pass_window"}
    assert filtered.key == seed.key and filtered.frame().schema == filtered.schema


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(value=_json_values, garbage=st.booleans())
def test_json_check_shapes(value, garbage: bool) -> None:
    text = json.dumps(value) + ("}" if garbage else "")
    frame = pl.DataFrame({"c": [text]})
    for kind, ok in (("any", True), ("list", isinstance(value, list)), ("object", isinstance(value, dict))):
        assert json_check("c", kind).fn(frame) == [garbage or not ok]
    with_keys = json_check("c", "object", required_keys=("a",)).fn(frame)
    assert with_keys == [garbage or not (isinstance(value, dict) and "a" in value)]


def test_two_records_of_one_name_are_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    double = types.ModuleType("tasks.test_double_records")
    double.QA_SEED = RECORDS["qa_seed"].extend("qa_seed", "A second record that takes qa_seed's name.", {})
    monkeypatch.setitem(sys.modules, double.__name__, double)
    with pytest.raises(StageError, match="two records are named 'qa_seed'"):
        records()

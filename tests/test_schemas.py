from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_contracts.gate import check_contract, validate
from data_contracts.schemas import RECORDS, extend, in_set, json_check


def _frame(contract, overrides: dict) -> pl.DataFrame:
    """One row of plain values for every column of the contract, then ``overrides``."""
    values = {pl.String: "x", pl.Int64: 1, pl.Float64: 0.5, pl.Boolean: True}
    row = {}
    for column, dtype in contract.columns.items():
        if isinstance(dtype, pl.List):
            row[column] = [values[dtype.inner.base_type()]]
        else:
            row[column] = values[dtype.base_type()]
    row |= overrides
    return pl.DataFrame([row], schema=contract.columns)


_VALID = {
    "qa_seed": {"source": "world", "split": "train", "docs": '[{"title": "t", "text": "x", "is_supporting": true}]'},
    "keychain": {"prompt": '[{"role": "user", "content": "x"}]', "distractor_chains": "[]"},
    "environment": {"tools": "[]", "edges": "[]", "golden_chains": "[]"},
    "task": {"user_profile": "{}", "rubric": "{}", "golden_actions": "[]", "difficulty": "{}", "noise": None},
    "trajectory": {"messages": "[]", "segments": "[]", "reward_components": "{}", "failure_label": None},
}
_SPOILED = {"qa_seed": "docs", "keychain": "prompt", "environment": "tools", "task": "rubric", "trajectory": "messages"}


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_record_contracts(record: str) -> None:
    contract = RECORDS[record]
    check_contract(contract)
    good = _frame(contract, _VALID[record])
    assert validate(record, "o", good, contract, "p0").passed
    spoiled = validate(record, "o", good.with_columns(pl.lit("{oops").alias(_SPOILED[record])), contract, "p0")
    assert not spoiled.passed and spoiled.failures()[0].name == f"{_SPOILED[record]}_json"
    doubled = validate(record, "o", pl.concat([good, good]), contract, "p0")
    assert not doubled.passed and "Unique" in doubled.failures()[0].name


def test_extend_adds_rules() -> None:
    base = RECORDS["qa_seed"]
    more = extend(base, columns={"pass_k": pl.Int64}, expectations=(in_set("type", ["bridge"]),), min_rows=2)
    assert set(more.columns) == set(base.columns) | {"pass_k"} and more.min_rows == 2
    assert more.expectations[:-1] == base.expectations and more.checks == base.checks


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

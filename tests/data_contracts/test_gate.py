from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_contracts.data_docs import build_data_docs
from data_contracts.gate import check_contract, validate
from data_contracts.stage import EXPECTATIONS, Check, Contract, Expect, StageError

GOOD = pl.DataFrame({
    "id": ["a1", "a2", "a3"],
    "n": [1, 5, 9],
    "m": [0, 0, 2],
    "kind": ["hard", "easy_mc", "hard"],
    "doc": ['["x"]', "[]", '{"k": 1}'],
})

# (expectation, column to spoil, spoiled value at row 1) — the spoiled row must be the only one reported.
CASES = [
    (Expect("ExpectColumnValuesToNotBeNull", column="id"), "id", None),
    (Expect("ExpectColumnValuesToMatchRegex", column="id", regex=r"^a\d$"), "id", "b2"),
    (Expect("ExpectColumnValuesToBeUnique", column="id"), "id", "a1"),
    (Expect("ExpectColumnValuesToBeInSet", column="kind", value_set=["hard", "easy_mc"]), "kind", "medium"),
    (Expect("ExpectColumnValuesToBeBetween", column="n", min_value=0, max_value=10), "n", 11),
    (Expect("ExpectColumnValueLengthsToBeBetween", column="id", min_value=2, max_value=2), "id", "a22"),
    (Expect("ExpectColumnValuesToBeJsonParseable", column="doc"), "doc", "{not json"),
    (Expect("ExpectColumnPairValuesAToBeGreaterThanB", column_A="n", column_B="m"), "n", 0),
    (Expect("ExpectCompoundColumnsToBeUnique", column_list=["kind", "m"]), "kind", "hard"),
]


def _spoil(column: str, value: object) -> pl.DataFrame:
    return GOOD.with_columns(
        pl.when(pl.int_range(pl.len()) == 1).then(pl.lit(value, dtype=GOOD.schema[column]))
        .otherwise(pl.col(column)).alias(column)
    )


@pytest.mark.parametrize(("expect", "column", "value"), CASES, ids=[c[0].kind for c in CASES])
def test_expectation_kinds_pass_and_fail(expect: Expect, column: str, value: object) -> None:
    contract = Contract(expectations=(expect,))
    assert validate("s", "o", GOOD, contract, "p0").passed
    report = validate("s", "o", _spoil(column, value), contract, "p0")
    assert not report.passed
    (failure,) = report.failures("critical")
    assert failure.kind == expect.kind and failure.name.startswith(expect.kind) and failure.unexpected_count >= 1
    assert 1 in report.failing_rows


def test_table_level_expectation() -> None:
    contract = Contract(expectations=(Expect("ExpectTableRowCountToBeBetween", min_value=4),))
    report = validate("s", "o", GOOD, contract, "p0")
    assert not report.passed and "observed 3" in report.failures()[0].message
    assert report.failing_rows == []  # a table-level failure names no row


def test_columns_and_dtypes() -> None:
    contract = Contract(columns={"id": pl.String, "n": pl.String, "missing": pl.Int64, "tags": pl.List(pl.String)})
    report = validate("s", "o", GOOD.with_columns(tags=pl.lit(["a"])), contract, "p0")
    assert not report.passed
    message = report.failures()[0].message
    assert "missing column 'missing'" in message and "column 'n' is Int64, expected String" in message
    assert "tags" not in message and "'id'" not in message


def test_min_rows() -> None:
    assert validate("s", "o", GOOD, Contract(min_rows=3), "p0").passed
    report = validate("s", "o", GOOD, Contract(min_rows=4), "p0")
    assert not report.passed and report.failures()[0].message == "3 rows, at least 4 required"


def test_warning_does_not_gate() -> None:
    contract = Contract(
        expectations=(Expect("ExpectColumnValuesToBeBetween", severity="warning", column="n", max_value=4),),
        checks=(Check("n_odd", lambda f: f["n"] % 2 == 0, severity="warning"),),
    )
    report = validate("s", "o", GOOD, contract, "p0")
    assert report.passed and report.failing_rows == []
    assert [r.name for r in report.failures("warning")] == ["ExpectColumnValuesToBeBetween(n)"]
    assert report.summary()["warnings"] and not report.summary()["failed"]


def test_expectation_on_missing_column_fails() -> None:
    report = validate("s", "o", GOOD, Contract(expectations=(Expect("ExpectColumnValuesToNotBeNull", column="zz"),)), "p0")
    assert not report.passed and "['zz'] not in the output" in report.failures()[0].message


@pytest.mark.parametrize(
    ("kind", "kwargs", "match"),
    [
        ("ExpectColumnValuesToBeShiny", {"column": "id"},
         "unknown Great Expectations expectation kind 'ExpectColumnValuesToBeShiny'"),
        ("ExpectColumnValuesToMatchRegex", {"column": "id", "regexp": "x"}, r"unknown argument\(s\) \['regexp'\]"),
        ("ExpectColumnValuesToMatchRegex", {"column": "id"}, r"missing argument\(s\) \['regex'\]"),
        ("Contract", {}, "unknown Great Expectations expectation kind 'Contract'"),
    ],
)
def test_misdeclared_expectation_fails_where_it_is_declared(kind: str, kwargs: dict, match: str) -> None:
    with pytest.raises(StageError, match=match):
        Expect(kind, **kwargs)


@pytest.mark.parametrize("kind", sorted(EXPECTATIONS))
def test_the_declarable_expectations_are_real_gx_classes_with_those_arguments(kind: str) -> None:
    import great_expectations.expectations as gxe

    required, optional = EXPECTATIONS[kind]
    fields = set(getattr(gxe, kind).__fields__)  # GX 1.x expectations are pydantic v1 models
    assert required | optional <= fields, sorted(required | optional - fields)
    arguments = required | (optional & {"min_value"})  # GX wants a bound for its "between" kinds
    check_contract(Contract(expectations=(Expect(kind, **{name: _value(name) for name in arguments}),)))


def _value(argument: str) -> object:
    return {"column_list": ["a", "b"], "value_set": ["x"], "value": 1, "regex": "x", "min_value": 0}.get(argument, "a")


def test_check_errors() -> None:
    wrong_length = Contract(checks=(Check("short", lambda f: [True]),))
    with pytest.raises(StageError, match="check 'short' returned 1 flags for 3 rows"):
        validate("s", "o", GOOD, wrong_length, "p0")
    raising = validate("s", "o", GOOD, Contract(checks=(Check("boom", lambda f: f["nope"]),)), "p0")
    assert not raising.passed and "raised ColumnNotFoundError" in raising.failures()[0].message
    assert raising.failing_rows == [0, 1, 2]


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.integers(-50, 50)), max_size=40),
       threshold=st.integers(-50, 50), as_list=st.booleans())
def test_python_check_reports_exactly_the_failing_rows(values: list[int | None], threshold: int, as_list: bool) -> None:
    def too_big(frame: pl.DataFrame) -> pl.Series | list[bool]:
        flags = frame["v"] > threshold
        return [bool(x) if x is not None else None for x in flags] if as_list else flags  # type: ignore[misc]

    frame = pl.DataFrame({"v": values}, schema={"v": pl.Int64})
    report = validate("s", "o", frame, Contract(checks=(Check("too_big", too_big),)), "p0")
    # a null flag means the check could not decide, which counts as failing
    expected = [i for i, v in enumerate(values) if v is None or v > threshold]
    assert report.failing_rows == expected
    assert report.passed == (not expected)
    assert report.results[-1].unexpected_count == len(expected)


def test_data_docs_from_reports(tmp_path) -> None:
    contract = Contract(expectations=(Expect("ExpectColumnValuesToBeUnique", column="kind"),))
    reports = [validate("s", "o", GOOD, Contract(), "p0"), validate("s<b>", "o", GOOD, contract, "p1")]
    index = build_data_docs(tmp_path, reports)
    text = index.read_text()
    assert "2 validations, 1 failed" in text and "s&lt;b&gt;" in text and "<b>" not in text
    assert "ExpectColumnValuesToBeUnique(kind)" in (tmp_path / "data_docs" / "validations" / "report-1.html").read_text()


def test_check_must_return_booleans() -> None:
    with pytest.raises(StageError, match="check 'ints' returned Int64 values; return booleans"):
        validate("s", "o", GOOD, Contract(checks=(Check("ints", lambda f: f["n"]),)), "p0")

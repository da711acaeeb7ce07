"""The contract gate: validate one output frame against its Contract (DESIGN.md section 3).

Three layers, cheapest first: declared columns and dtypes plus ``min_rows`` (polars); the contract's
``Expect`` entries as one Great Expectations 1.x suite on a pandas copy of only the columns they name; the
contract's Python ``Check`` functions on the polars frame. Only a failure of ``critical`` severity fails the gate;
warnings are reported and kept in the manifest.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, Field

from data_contracts.stage import Check, Contract, DirectoryContract, Expect, Severity, StageError

# Keyword arguments of GX expectations that name columns: only these columns are converted to pandas.
_COLUMN_KWARGS = ("column", "column_A", "column_B")
_COLUMN_LIST_KWARGS = ("column_list",)
_SAMPLE = 3  # unexpected values quoted in a failure message
_GX_LOCK = threading.Lock()  # one GX context per process; its data-source registry is not thread-safe


class ExpectationResult(BaseModel):
    name: str = Field(description="What was checked, e.g. 'ExpectColumnValuesToNotBeNull(id)' or a Check's name.")
    kind: str = Field(description="'schema', 'min_rows', 'check', or the GX expectation class name.")
    severity: Severity
    success: bool
    unexpected_count: int = 0
    message: str = ""


class GateReport(BaseModel):
    stage: str
    output: str
    partition: str
    passed: bool = Field(description="False iff a critical expectation failed.")
    rows: int
    results: list[ExpectationResult]
    failing_rows: list[int] = Field(description="Row indices failing a critical expectation or check, sorted.")
    seconds: float

    def failures(self, severity: Severity | None = None) -> list[ExpectationResult]:
        return [r for r in self.results if not r.success and (severity is None or r.severity == severity)]

    def summary(self) -> dict[str, Any]:
        """What the manifest keeps: the verdict and the names of what failed, not the row indices."""
        return {
            "passed": self.passed,
            "rows": self.rows,
            "expectations": len(self.results),
            "failed": [f"{r.name}: {r.message}" for r in self.failures("critical")],
            "warnings": [f"{r.name}: {r.message}" for r in self.failures("warning")],
            "failing_rows": len(self.failing_rows),
            "seconds": round(self.seconds, 4),
        }


# --- Great Expectations -----------------------------------------------------------------------------------------


@cache
def _gx() -> tuple[Any, Any, Any]:
    """The GX module, its expectations module and a batch definition over an in-memory pandas frame, once per
    process: an ephemeral context costs about a second to build."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.execution_engine import pandas_execution_engine

    for name in ("great_expectations", "great_expectations.core", "great_expectations.data_context"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # GX fingerprints every in-memory batch under 1 GB by hashing all its cells, twice per validation: two thirds
    # of the gate's time on 200k rows (bench/bench_gate.py). The fingerprint is a batch marker we never read; a
    # threshold of 0 skips it and leaves every expectation's computation unchanged.
    if hasattr(pandas_execution_engine, "HASH_THRESHOLD"):
        pandas_execution_engine.HASH_THRESHOLD = 0
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    batch_definition = (
        context.data_sources.add_pandas("gymforge_gate")
        .add_dataframe_asset("frame")
        .add_batch_definition_whole_dataframe("whole")
    )
    return gx, gxe, batch_definition


def expectation_columns(expect: Expect) -> list[str]:
    columns = [expect.kwargs[k] for k in _COLUMN_KWARGS if k in expect.kwargs]
    for k in _COLUMN_LIST_KWARGS:
        columns.extend(expect.kwargs.get(k, ()))
    return columns


def expectation_name(expect: Expect) -> str:
    return f"{expect.kind}({', '.join(expectation_columns(expect))})"


def build_expectation(expect: Expect, index: int = 0) -> Any:
    """The GX expectation object for an ``Expect``; a StageError names an unknown kind or a bad argument."""
    _, gxe, _ = _gx()
    from great_expectations.expectations.expectation import Expectation

    cls = getattr(gxe, expect.kind, None)
    if not (isinstance(cls, type) and issubclass(cls, Expectation)):
        raise StageError(
            f"unknown Great Expectations expectation kind {expect.kind!r}; use a class name from "
            "great_expectations.expectations, e.g. 'ExpectColumnValuesToNotBeNull'"
        )
    kwargs = dict(expect.kwargs)
    meta = {**kwargs.pop("meta", {}), "gate_index": index}  # GX returns results in its own order, not the suite's
    try:
        return cls(**kwargs, severity=expect.severity, meta=meta)
    except Exception as exc:  # noqa: BLE001 - GX raises pydantic.v1 ValidationError or its own; the text names the field
        raise StageError(f"invalid arguments for {expect.kind}{dict(expect.kwargs)}: {exc}") from None


def check_contract(contract: Contract) -> None:
    """Build every expectation of a contract once, so a misdeclared contract fails in a unit test, not a run."""
    for i, expect in enumerate(contract.expectations):
        build_expectation(expect, i)


def _gx_message(result: Mapping[str, Any]) -> str:
    if "unexpected_count" in result and result.get("element_count") is not None:
        sample = list(result.get("partial_unexpected_list") or [])[:_SAMPLE]
        return f"{result['unexpected_count']} of {result['element_count']} rows unexpected, e.g. {sample!r}"[:500]
    if "observed_value" in result:
        return f"observed {result['observed_value']!r}"[:500]
    return ""


def _run_gx(frame: pl.DataFrame, expects: Sequence[tuple[int, Expect]]) -> dict[int, tuple[ExpectationResult, list]]:
    gx, _, batch_definition = _gx()
    built = [build_expectation(expect, i) for i, expect in expects]
    columns = sorted({c for _, expect in expects for c in expectation_columns(expect)})
    # Convert only the columns the expectations name: a wide text frame costs more to copy than to validate.
    if columns:
        pandas_frame = frame.select(columns).to_pandas()
    else:  # table-level expectations only: a frame with the right number of rows and no columns
        import pandas as pd

        pandas_frame = pd.DataFrame(index=pd.RangeIndex(frame.height))
    declared = dict(expects)
    with _GX_LOCK:
        batch = batch_definition.get_batch(batch_parameters={"dataframe": pandas_frame})
        # Most outputs pass: a boolean pass first (about half of GX's fixed cost of a full result, see
        # bench/bench_gate.py), then the full result with row indices only for what failed.
        first = batch.validate(gx.ExpectationSuite(name="gate", expectations=built), result_format="BOOLEAN_ONLY")
        failed = [item.expectation_config.meta["gate_index"] for item in first.results if not item.success]
        details = {}
        if failed:  # fresh expectation objects: GX binds each to the first suite it joins
            again = gx.ExpectationSuite(name="gate-failures",
                                        expectations=[build_expectation(declared[i], i) for i in failed])
            details = {item.expectation_config.meta["gate_index"]: item
                       for item in batch.validate(again, result_format="COMPLETE").results}
    by_index: dict[int, tuple[ExpectationResult, list]] = {}
    for item in first.results:
        index = item.expectation_config.meta["gate_index"]
        item = details.get(index, item)
        expect = declared[index]
        info = item.exception_info or {}
        raised = info.get("raised_exception", False)
        result = dict(item.result or {})
        by_index[index] = (
            ExpectationResult(
                name=expectation_name(expect),
                kind=expect.kind,
                severity=expect.severity,
                success=bool(item.success) and not raised,
                unexpected_count=int(result.get("unexpected_count") or 0),
                message=f"raised {info.get('exception_message')}" if raised else ("" if item.success else _gx_message(result)),
            ),
            list(result.get("unexpected_index_list") or []) if not item.success else [],
        )
    return by_index


# --- Python checks ----------------------------------------------------------------------------------------------


def _run_check(frame: pl.DataFrame, check: Check) -> tuple[ExpectationResult, list[int]]:
    def result(success: bool, count: int, message: str) -> ExpectationResult:
        return ExpectationResult(
            name=check.name, kind="check", severity=check.severity, success=success,
            unexpected_count=count, message=message,
        )

    try:
        flags = check.fn(frame)
    except Exception as exc:  # noqa: BLE001 - a check that cannot evaluate the data fails; it does not crash the run
        return result(False, frame.height, f"raised {type(exc).__name__}: {exc}"[:500]), list(range(frame.height))
    flags = flags if isinstance(flags, pl.Series) else pl.Series(list(flags))
    if flags.dtype not in (pl.Boolean, pl.Null):
        raise StageError(f"check {check.name!r} returned {flags.dtype} values; return booleans, True where a row fails")
    if len(flags) != frame.height:
        raise StageError(
            f"check {check.name!r} returned {len(flags)} flags for {frame.height} rows; "
            "return one boolean per row, True where the row fails"
        )
    # A null flag means the check could not decide: treat it as a failure rather than a pass.
    failing = flags.cast(pl.Boolean).fill_null(True).arg_true().to_list()
    message = "" if not failing else f"{len(failing)} of {frame.height} rows fail, e.g. rows {failing[:_SAMPLE]}"
    if failing and check.description:
        message = f"{check.description}: {message}"
    return result(not failing, len(failing), message), failing


# --- the gate ---------------------------------------------------------------------------------------------------


def _schema_result(frame: pl.DataFrame, contract: Contract) -> ExpectationResult:
    problems = []
    for column, dtype in contract.columns.items():
        if column not in frame.schema:
            problems.append(f"missing column {column!r} ({dtype})")
        elif frame.schema[column] != dtype:
            problems.append(f"column {column!r} is {frame.schema[column]}, expected {dtype}")
    if contract.record is not None:  # an output holds its record's columns exactly: no undeclared drift
        problems += [f"column {column!r} is not in record {contract.record!r}"
                     for column in frame.columns if column not in contract.columns]
    return ExpectationResult(
        name="columns", kind="schema", severity="critical", success=not problems,
        unexpected_count=len(problems), message="; ".join(problems),
    )


def validate(stage: str, output: str, frame: pl.DataFrame, contract: Contract, partition: str) -> GateReport:
    """Validate ``frame`` against ``contract``; the report's ``passed`` is False iff a critical check failed."""
    start = time.perf_counter()
    results: list[ExpectationResult] = [_schema_result(frame, contract)]
    failing: set[int] = set()
    if contract.min_rows:
        ok = frame.height >= contract.min_rows
        results.append(ExpectationResult(
            name="min_rows", kind="min_rows", severity="critical", success=ok,
            message="" if ok else f"{frame.height} rows, at least {contract.min_rows} required",
        ))

    runnable: list[tuple[int, Expect]] = []
    ordered: dict[int, ExpectationResult] = {}
    for i, expect in enumerate(contract.expectations):
        missing = [c for c in expectation_columns(expect) if c not in frame.schema]
        if missing:
            build_expectation(expect, i)  # still report a misdeclared expectation as such
            ordered[i] = ExpectationResult(
                name=expectation_name(expect), kind=expect.kind, severity=expect.severity, success=False,
                message=f"column(s) {missing} not in the output",
            )
        else:
            runnable.append((i, expect))
    if runnable:
        for i, (res, rows) in _run_gx(frame, runnable).items():
            ordered[i] = res
            if res.severity == "critical":
                failing.update(rows)
    results.extend(ordered[i] for i in sorted(ordered))

    for check in contract.checks:
        res, rows = _run_check(frame, check)
        results.append(res)
        if res.severity == "critical":
            failing.update(rows)

    return GateReport(
        stage=stage, output=output, partition=partition,
        passed=not any(r.severity == "critical" and not r.success for r in results),
        rows=frame.height, results=results, failing_rows=sorted(failing),
        seconds=time.perf_counter() - start,
    )


def validate_directory(stage: str, path: Path, contract: DirectoryContract, partition: str) -> GateReport:
    """Run a directory output's checks (a checkpoint loads and generates, an index answers); every check is
    critical, and one that raises fails with what it raised."""
    start = time.perf_counter()
    results = []
    for check in contract.checks:
        try:
            problem = check.fn(path)
        except Exception as exc:  # noqa: BLE001 - a check that cannot evaluate the directory fails it
            problem = f"raised {type(exc).__name__}: {exc}"[:500]
        message = "" if problem is None else (f"{check.description}: {problem}" if check.description else problem)
        results.append(ExpectationResult(name=check.name, kind="check", severity="critical", success=problem is None,
                                         unexpected_count=int(problem is not None), message=message))
    files = sum(1 for p in path.rglob("*") if p.is_file())
    return GateReport(stage=stage, output=contract.name, partition=partition,
                      passed=all(r.success for r in results), rows=files, results=results, failing_rows=[],
                      seconds=time.perf_counter() - start)

from __future__ import annotations

import json
import pickle
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import polars as pl
import pytest
from pydantic import Field

from data_contracts.catalog import Catalog
from data_contracts.data_docs import build_data_docs
from data_contracts.roots import open_store
from data_contracts.runner import (
    ContractViolation,
    UpstreamMissing,
    execute_stage,
    plan,
    planned_keys,
    run_serially,
)
from data_contracts.stage import (
    REJECTED,
    STAGES,
    Check,
    Contract,
    Expect,
    Params,
    Stage,
    StageError,
    get_stage,
    stage,
)
from data_contracts.store import VALIDATION, ArtifactStore

CALLS: Counter[str] = Counter()


class _TestDoubleSourceParams(Params):
    n: int = Field(3, description="Rows to emit.")
    plant_bad_row: bool = Field(False, description="Emit one id that breaks the contract.")
    mode: Literal["plain", "shouty"] = Field("plain", description="Text style.")


class _TestDoubleSinkParams(Params):
    pass


@pytest.fixture
def doubles() -> Iterator[dict[str, Stage]]:
    """A three-stage diamond-free chain (source -> sink -> report) plus a side branch, removed afterwards."""
    before = set(STAGES)
    CALLS.clear()

    @stage(
        name="_test_double_source", version="1", params=_TestDoubleSourceParams,
        outputs={"rows": Contract(
            columns={"id": pl.String, "text": pl.String},
            expectations=(Expect("ExpectColumnValuesToMatchRegex", column="id", regex=r"^r\d+$"),),
            checks=(Check("text_not_empty", lambda f: f["text"].str.len_chars() == 0),),
        )},
    )
    def source(inputs, params, partition):
        CALLS["_test_double_source"] += 1
        ids = [f"r{i}" for i in range(params.n)]
        if params.plant_bad_row:
            ids[1] = "BAD"
        text = [f"{partition}-{i}" for i in range(params.n)]
        if params.mode == "shouty":
            text = [t.upper() for t in text]
        return {"rows": pl.DataFrame({"id": ids, "text": text}), REJECTED: pl.DataFrame({"reason": ["too long"]})}

    @stage(name="_test_double_sink", version="1", params=_TestDoubleSinkParams, inputs=("_test_double_source",),
           outputs={"upper": Contract(columns={"id": pl.String}, min_rows=1)})
    def sink(inputs, params, partition):
        CALLS["_test_double_sink"] += 1
        return {"upper": inputs["_test_double_source"].read("rows").select(pl.col("id").str.to_uppercase())}

    @stage(name="_test_double_report", version="1", params=_TestDoubleSinkParams,
           inputs=("_test_double_sink", "_test_double_side"), outputs={"n": Contract()})
    def report(inputs, params, partition):
        return {"n": pl.DataFrame({"n": [inputs["_test_double_sink"].read("upper").height]})}

    @stage(name="_test_double_side", version="1", params=_TestDoubleSinkParams, outputs={"x": Contract()})
    def side(inputs, params, partition):
        return {"x": pl.DataFrame({"x": [1]})}

    yield {name: STAGES[name] for name in set(STAGES) - before}
    for name in set(STAGES) - before:
        del STAGES[name]


@pytest.fixture
def env(tmp_path: Path) -> tuple[ArtifactStore, Catalog]:
    return open_store(tmp_path), Catalog(tmp_path)


def test_cache_hit_does_not_run_again(doubles, env) -> None:
    store, catalog = env
    source = doubles["_test_double_source"]
    first = execute_stage(store, catalog, source, {"n": 4}, {}, "p0", flow_run_id="run-1")
    again = execute_stage(store, catalog, source, {"n": 4}, {}, "p0")
    assert CALLS["_test_double_source"] == 1
    assert not first.cached and again.cached and again.key == first.key
    assert again.outputs == first.outputs == {"rows": 4, REJECTED: 1}
    assert set(first.timings) == {"run_s", "gate_s", "publish_s"} and first.contract == {"rows": True, REJECTED: True}
    assert store.get(source.name, first.key).manifest["flow_run_id"] == "run-1"
    execute_stage(store, catalog, source, {"n": 4}, {}, "p0", force=True)
    execute_stage(store, catalog, source, {"n": 4}, {}, "p1")
    assert CALLS["_test_double_source"] == 3
    assert catalog.artifacts().height == 2


def test_bad_row_quarantines_and_blocks_downstream(doubles, env) -> None:
    store, catalog = env
    source, sink = doubles["_test_double_source"], doubles["_test_double_sink"]
    with pytest.raises(ContractViolation) as info:
        execute_stage(store, catalog, source, {"plant_bad_row": True}, {}, "p7")
    message = str(info.value)
    assert "'_test_double_source'" in message and "'p7'" in message
    assert "ExpectColumnValuesToMatchRegex(id)" in message and "'rows'" in message
    key = info.value.key
    assert store.get(source.name, key) is None
    assert info.value.quarantine_path == store.quarantined(source.name, key)
    validation = json.loads((info.value.quarantine_path / VALIDATION).read_text())
    assert validation["rows"]["failing_rows"] == [1]
    assert pl.read_parquet(info.value.quarantine_path / "rows.failing.parquet")["id"].to_list() == ["BAD"]
    assert catalog.entry(key).status == "quarantined"

    with pytest.raises(UpstreamMissing, match=f"'_test_double_source' artifact {key} is missing.*quarantined"):
        execute_stage(store, catalog, sink, {}, {source.name: key}, "p7")
    assert CALLS["_test_double_sink"] == 0


def test_downstream_reads_published_input(doubles, env) -> None:
    store, catalog = env
    runs = run_serially(store, catalog, ["_test_double_sink"], {"_test_double_source": {"n": 2}}, "p0", progress=False)
    assert list(runs) == ["_test_double_source", "_test_double_sink"]
    upper = store.get("_test_double_sink", runs["_test_double_sink"].key).read("upper")
    assert upper["id"].to_list() == ["R0", "R1"]
    lineage = catalog.lineage(runs["_test_double_sink"].key)
    assert lineage.select("input_stage", "input_key", "depth").rows() == [
        ("_test_double_source", runs["_test_double_source"].key, 1)
    ]
    rerun = run_serially(store, catalog, ["_test_double_sink"], {"_test_double_source": {"n": 2}}, "p0",
                        force=True, progress=False)
    assert not rerun["_test_double_sink"].cached and rerun["_test_double_source"].cached


def test_plan_orders_the_upstream_closure(doubles) -> None:
    names = [s.name for s in plan(["_test_double_report"])]
    assert sorted(names) == sorted(doubles)
    assert names.index("_test_double_source") < names.index("_test_double_sink") < names.index("_test_double_report")
    assert names.index("_test_double_side") < names.index("_test_double_report")
    assert [s.name for s in plan(["_test_double_sink"])] == ["_test_double_source", "_test_double_sink"]


def test_plan_errors(doubles) -> None:
    with pytest.raises(StageError, match="unknown stage 'nope'; known stages: .*_test_double_sink"):
        plan(["nope"])
    dummy = get_stage("_test_double_side")
    STAGES["_test_double_loop_a"] = Stage("_test_double_loop_a", "1", ("_test_double_loop_b",), dummy.params,
                                          dummy.outputs, dummy.run)
    STAGES["_test_double_loop_b"] = Stage("_test_double_loop_b", "1", ("_test_double_loop_a",), dummy.params,
                                          dummy.outputs, dummy.run)
    with pytest.raises(StageError, match="cycle: _test_double_loop_. -> _test_double_loop_. -> _test_double_loop_"):
        plan(["_test_double_loop_a"])


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({"mode": "quiet"}, r"mode='quiet': Input should be 'plain' or 'shouty'"),
        ({"n": "many"}, r"n='many': Input should be a valid integer"),
        ({"typo": 1}, r"typo is not a field"),
        ({"nn": 1}, r"nn is not a field \(did you mean n\?\)"),
    ],
)
def test_bad_params_name_field_and_allowed_values(doubles, env, raw: dict, match: str) -> None:
    store, catalog = env
    with pytest.raises(StageError, match=match) as info:
        execute_stage(store, catalog, doubles["_test_double_source"], raw, {}, "p0")
    assert str(info.value).startswith("_test_double_source: ") and "\n" not in str(info.value)
    assert CALLS["_test_double_source"] == 0


def _run_returning(env, frames: dict, outputs: dict | None = None) -> None:
    store, catalog = env
    declared = Stage("_test_double_adhoc", "1", (), _TestDoubleSinkParams,
                     outputs or {"rows": Contract()}, lambda inputs, params, partition: frames)
    execute_stage(store, catalog, declared, {}, {}, "p0")


@pytest.mark.parametrize(
    ("frames", "match"),
    [
        ({"rows": pl.DataFrame({"a": [1]}), "extra": pl.DataFrame()}, r"undeclared: \['extra'\]"),
        ({}, r"missing: \['rows'\]"),
        ({"rows": [1, 2]}, "output 'rows' is a list, not a polars DataFrame"),
    ],
)
def test_outputs_must_match_declaration(env, frames: dict, match: str) -> None:
    with pytest.raises(StageError, match=match):
        _run_returning(env, frames)


def test_rejected_output_uses_rejected_contract(env) -> None:
    with pytest.raises(ContractViolation, match="'rejected': columns: missing column 'reason'"):
        _run_returning(env, {"rows": pl.DataFrame({"a": [1]}), REJECTED: pl.DataFrame({"why": ["x"]})})


def test_declared_rejected_is_optional(env) -> None:
    store, _ = env
    rejected = Contract(columns={"reason": pl.String, "score": pl.Float64})
    _run_returning(env, {"rows": pl.DataFrame({"a": [1]})}, {"rows": Contract(), REJECTED: rejected})
    (manifest, _), = store.manifests()
    assert manifest["outputs"][REJECTED]["rows"] == 0
    assert manifest["outputs"][REJECTED]["columns"] == {"reason": "String", "score": "Float64"}


def test_input_keys_must_match_inputs(doubles, env) -> None:
    store, catalog = env
    with pytest.raises(StageError, match=r"reads inputs \['_test_double_source'\]; got keys for \[\]"):
        execute_stage(store, catalog, doubles["_test_double_sink"], {}, {}, "p0")
    with pytest.raises(UpstreamMissing, match="not published"):
        execute_stage(store, catalog, doubles["_test_double_sink"], {}, {"_test_double_source": "0" * 20}, "p0")


class _TestDoubleOptionalParams(Params):
    with_side: bool = Field(False, description="Also read the side input.")


def test_an_optional_input_is_read_and_keyed_only_when_asked_for(doubles, env) -> None:
    store, catalog = env

    @stage(name="_test_double_optional", version="1", params=_TestDoubleOptionalParams,
           inputs=("_test_double_source", "_test_double_side"), optional_inputs={"_test_double_side": "with_side"},
           outputs={"n": Contract()})
    def optional(inputs, params, partition):
        return {"n": pl.DataFrame({"n": [len(inputs)]})}

    source = execute_stage(store, catalog, doubles["_test_double_source"], {}, {}, "p0").key
    missing = {"_test_double_source": source, "_test_double_side": "0" * 20}  # the side artifact was never made
    off = execute_stage(store, catalog, optional, {}, missing, "p0")
    assert store.get(optional.name, off.key).read("n")["n"].to_list() == [1]
    assert catalog.inputs(off.key) == {"_test_double_source": source}
    assert execute_stage(store, catalog, optional, {}, {"_test_double_source": source}, "p0").key == off.key
    with pytest.raises(UpstreamMissing, match="_test_double_side"):
        execute_stage(store, catalog, optional, {"with_side": True}, missing, "p0")
    side = execute_stage(store, catalog, doubles["_test_double_side"], {}, {}, "p0").key
    on = execute_stage(store, catalog, optional, {"with_side": True},
                       {"_test_double_source": source, "_test_double_side": side}, "p0")
    assert catalog.inputs(on.key) == {"_test_double_source": source, "_test_double_side": side}
    with pytest.raises(StageError, match=r"reads inputs \['_test_double_side', '_test_double_source'\]"):
        execute_stage(store, catalog, optional, {"with_side": True}, {"_test_double_source": source}, "p0")

    def planned(params: dict) -> list[str]:
        return [s.name for s in plan(["_test_double_optional"], params_by_stage={"_test_double_optional": params})]

    assert planned({}) == ["_test_double_source", "_test_double_optional"]
    assert planned({"with_side": True}) == ["_test_double_side", "_test_double_source", "_test_double_optional"]
    runs = run_serially(store, catalog, ["_test_double_optional"], {}, "p1", progress=False)
    assert list(runs) == ["_test_double_source", "_test_double_optional"]
    assert runs["_test_double_optional"].key == planned_keys(plan(["_test_double_optional"]), {}, "p1")[optional.name]


@pytest.mark.parametrize(("optional_inputs", "match"), [
    ({"_test_double_side": "with_side"}, "not one of its inputs"),
    ({"_test_double_source": "nope"}, "not a bool field"),
])
def test_an_optional_input_is_declared_among_the_inputs_with_a_bool_param(optional_inputs, match) -> None:
    with pytest.raises(StageError, match=match):
        Stage("_test_double_bad", "1", ("_test_double_source",), _TestDoubleOptionalParams, {"n": Contract()},
              lambda i, p, s: {}, optional_inputs=optional_inputs)


def test_run_serially_rejects_params_for_unknown_stage(doubles, env) -> None:
    store, catalog = env
    with pytest.raises(StageError, match=r"unknown stage\(s\) \['_test_double_nope'\]"):
        run_serially(store, catalog, ["_test_double_sink"], {"_test_double_nope": {}}, "p0", progress=False)


def test_data_docs_list_every_validation(doubles, env) -> None:
    store, catalog = env
    run_serially(store, catalog, ["_test_double_sink"], {}, "p0", progress=False)
    with pytest.raises(ContractViolation):
        execute_stage(store, catalog, doubles["_test_double_source"], {"plant_bad_row": True}, {}, "p1")
    index = build_data_docs(store.root)
    assert index == store.root / "data_docs" / "index.html"
    text = index.read_text()
    assert "5 validations, 1 failed" in text  # source rows+rejected, sink upper (p0); source rows+rejected (p1)
    assert text.count("quarantined") == 2 and text.count("published") == 3
    pages = sorted((store.root / "data_docs" / "validations").glob("*/*.html"))
    assert len(pages) == 3
    quarantined = (store.root / "data_docs" / "validations" / "_test_double_source").glob("*.html")
    assert any("ExpectColumnValuesToMatchRegex(id)" in p.read_text() and "failed" in p.read_text() for p in quarantined)


def test_errors_survive_pickling(doubles, env) -> None:
    store, catalog = env
    with pytest.raises(ContractViolation) as violation:
        execute_stage(store, catalog, doubles["_test_double_source"], {"plant_bad_row": True}, {}, "p0")
    with pytest.raises(UpstreamMissing) as missing:
        execute_stage(store, catalog, doubles["_test_double_sink"], {}, {"_test_double_source": violation.value.key}, "p0")
    for exc in (violation.value, missing.value):
        copy = pickle.loads(pickle.dumps(exc))
        assert type(copy) is type(exc) and str(copy) == str(exc)


def test_lazy_outputs_are_collected(env) -> None:
    store, _ = env
    _run_returning(env, {"rows": pl.DataFrame({"a": [1, 2]}).lazy()})
    ((manifest, status),) = store.manifests()
    assert status == "published" and manifest["outputs"]["rows"]["rows"] == 2


def test_publishing_a_quarantined_key_clears_the_quarantine(env) -> None:
    store, catalog = env
    contract = Contract(expectations=(Expect("ExpectColumnValuesToBeBetween", column="v", min_value=0),))
    values = iter([[-1], [1]])  # the first run emits a bad row, the rerun (a fixed bug, same key) does not
    flaky = Stage("_test_double_flaky", "1", (), _TestDoubleSinkParams, {"rows": contract},
                  lambda inputs, params, partition: {"rows": pl.DataFrame({"v": next(values)})})
    with pytest.raises(ContractViolation) as info:
        execute_stage(store, catalog, flaky, {}, {}, "p0")
    run = execute_stage(store, catalog, flaky, {}, {}, "p0")
    assert run.key == info.value.key and store.quarantined(flaky.name, run.key) is None
    assert catalog.artifacts().select("key", "status").rows() == [(run.key, "published")]


def test_plan_ignores_unrelated_misdeclared_stages(doubles) -> None:
    dummy = get_stage("_test_double_side")
    STAGES["_test_double_orphan"] = Stage("_test_double_orphan", "1", ("_test_double_nowhere",), dummy.params,
                                          dummy.outputs, dummy.run)
    assert [s.name for s in plan(["_test_double_sink"])] == ["_test_double_source", "_test_double_sink"]
    with pytest.raises(StageError, match="'_test_double_orphan' reads '_test_double_nowhere', which is not a registered"):
        plan(["_test_double_orphan"])


def test_cache_hit_does_not_need_its_inputs_anymore(doubles, env) -> None:
    store, catalog = env
    runs = run_serially(store, catalog, ["_test_double_sink"], {}, "p0", progress=False)
    shutil.rmtree(store.path("_test_double_source", runs["_test_double_source"].key))
    sink = doubles["_test_double_sink"]
    again = execute_stage(store, catalog, sink, {}, {"_test_double_source": runs["_test_double_source"].key}, "p0")
    assert again.cached
    with pytest.raises(UpstreamMissing):
        execute_stage(store, catalog, sink, {}, {"_test_double_source": runs["_test_double_source"].key}, "p0",
                      force=True)


class _TestDoubleIndexParams(Params):
    words: int = Field(3, description="Words in the index file.")
    broken: bool = Field(False, description="Write nothing, which the directory contract rejects.")


def _index_stage() -> Stage:
    from data_contracts.stage import DirectoryCheck, DirectoryContract

    def has_words(path: Path) -> str | None:
        return None if (path / "words.txt").is_file() else "no words.txt"

    def build(inputs, params, partition, out_dir: Path) -> dict[str, pl.DataFrame]:
        if not params.broken:
            (out_dir / "words.txt").write_text(" ".join(f"w{i}" for i in range(params.words)))
            (out_dir / "nested").mkdir()
            (out_dir / "nested" / "meta.json").write_text("{}")
        return {"stats": pl.DataFrame({"words": [params.words]})}

    return Stage("_test_double_index", "1", (), _TestDoubleIndexParams, {"stats": Contract()}, build,
                 kind="index", directory=DirectoryContract("index", (DirectoryCheck("has_words", has_words),)))


def test_a_directory_artifact_is_published_gated_and_catalogued(tmp_path: Path) -> None:
    store, catalog = open_store(tmp_path), Catalog(tmp_path)
    index = _index_stage()
    run = execute_stage(store, catalog, index, {}, {}, "p0")
    artifact = store.get(index.name, run.key)
    assert artifact is not None and artifact.directory == artifact.path / "index"
    assert (artifact.directory / "words.txt").read_text() == "w0 w1 w2"
    assert artifact.manifest["directory"]["files"] == {"nested/meta.json": 2, "words.txt": 8}
    assert artifact.manifest["kind"] == "index" and artifact.read("stats")["words"].to_list() == [3]
    assert catalog.entry(run.key).kind == "index"
    assert store.leftovers() == []  # the scratch space is gone
    assert execute_stage(store, catalog, index, {}, {}, "p0").cached

    (artifact.directory / "words.txt").unlink()  # a published directory missing a file is not published
    assert store.get(index.name, run.key) is None

    with pytest.raises(ContractViolation, match="has_words: no words.txt"):
        execute_stage(store, catalog, index, {"broken": True}, {}, "p0")
    assert store.leftovers() == []


def test_a_directory_stage_must_declare_its_directory() -> None:
    from data_contracts.stage import DirectoryContract

    with pytest.raises(StageError, match="declares its directory"):
        Stage("_test_double_bad", "1", (), Params, {"x": Contract()}, lambda *a: {}, kind="model")
    with pytest.raises(StageError, match="a 'data' stage none"):
        Stage("_test_double_bad", "1", (), Params, {"x": Contract()}, lambda *a: {}, directory=DirectoryContract("d"))
    with pytest.raises(StageError, match="resources 'tpu'"):
        Stage("_test_double_bad", "1", (), Params, {"x": Contract()}, lambda *a: {}, resources="tpu")

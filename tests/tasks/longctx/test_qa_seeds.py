"""QA seed loaders (fixture files in each real format, corrupt and truncated variants), splits, the qa_seeds stage
and the qa_seed contract."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import QA_FIXTURES

from data_contracts.gate import validate
from data_contracts.stage import FrameArtifact, StageError
from tasks.longctx.qa_seeds import (
    load_seed_file,
    parse_docs,
    qa_seeds,
    seed_contract,
)
from tasks.longctx.records import QA_SEED
from tasks.readers import InputFileError, iter_json_array

FIXTURES = QA_FIXTURES
FILES = {"hotpotqa": "hotpotqa.json", "2wiki": "2wiki.json", "musique": "musique.jsonl"}
EXPECTED = {"hotpotqa": (3, 0), "2wiki": (2, 0), "musique": (2, 1)}  # (kept, rejected)


@pytest.mark.parametrize("kind", FILES)
def test_fixture_loads_into_the_qa_seed_record(kind: str) -> None:
    seeds, rejected = load_seed_file(kind, FIXTURES / FILES[kind], split="train")
    assert (seeds.height, rejected.height) == EXPECTED[kind]
    assert dict(seeds.schema) == QA_SEED.schema
    assert seeds["source"].unique().to_list() == [kind]
    assert seeds["id"].str.starts_with(f"{kind}:").all()
    for row in seeds.iter_rows(named=True):
        docs = parse_docs(row["docs"])
        assert any(d["is_supporting"] for d in docs)
        assert row["hops"] == sum(d["is_supporting"] for d in docs)
    assert validate("qa_seeds", "seeds", seeds, seed_contract(), "p0").passed


def test_fields_are_mapped() -> None:
    hotpot, _ = load_seed_file("hotpotqa", FIXTURES / "hotpotqa.json")
    row = hotpot.row(by_predicate=pl.col("answer") == "Chief of Protocol", named=True)
    docs = {d["title"]: d for d in parse_docs(row["docs"])}
    assert docs["Shirley Temple"]["is_supporting"] and not docs["Meet Corliss Archer"]["is_supporting"]
    assert docs["Kiss and Tell (1945 film)"]["text"].startswith("Kiss and Tell is a 1945")
    assert row["type"] == "bridge"
    musique, rejected = load_seed_file("musique", FIXTURES / "musique.jsonl")
    assert musique["aliases"].to_list()[0] == ["Nassau County, New York"]
    assert rejected["reason"][0].startswith("unanswerable") and "musique.jsonl:2" in rejected["reason"][0]


def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


@pytest.mark.parametrize("kind", FILES)
def test_corrupt_file_names_file_and_line(kind: str, tmp_path: Path) -> None:
    text = (FIXTURES / FILES[kind]).read_text()
    target = '"question"'  # a key: "@@" before it is outside any string
    bad = tmp_path / FILES[kind]
    bad.write_text(text.replace(target, "@@" + target, 1))
    with pytest.raises(InputFileError, match=rf"{bad.name}, line {_line_of(text, target)}: invalid JSON"):
        load_seed_file(kind, bad)


@pytest.mark.parametrize("kind", FILES)
def test_truncated_file_names_file_and_line(kind: str, tmp_path: Path) -> None:
    text = (FIXTURES / FILES[kind]).read_text()
    cut = text[: int(len(text) * 0.8)]
    bad = tmp_path / FILES[kind]
    bad.write_text(cut)
    with pytest.raises(InputFileError, match=rf"{bad.name}, line \d+") as err:
        load_seed_file(kind, bad)
    line = int(str(err.value).split("line ")[1].split(":")[0])
    assert 1 <= line <= cut.count("\n") + 1


@pytest.mark.parametrize(("text", "message"), [
    ("", "line 1: empty file"),
    ('{"_id": 1}', "line 1: expected a JSON list"),
    ("[{}]\n[]", "line 2: unexpected data after the end"),
    ('[{"a": 1}\n {"b": 2}]', r"line 2: expected ',' or '\]'"),
])
def test_json_list_shape_errors(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "shape.json"
    path.write_text(text)
    with pytest.raises(InputFileError, match=rf"shape.json, {message}"):
        list(iter_json_array(path))


@pytest.mark.parametrize(("kind", "mutate", "message"), [
    ("hotpotqa", lambda r: r.pop("question"), "no field 'question'"),
    ("hotpotqa", lambda r: r.update(context="oops"), "field 'context' must be list"),
    ("musique", lambda r: r.pop("paragraphs"), "no field 'paragraphs'"),
])
def test_malformed_record_names_the_field(kind: str, mutate, message: str, tmp_path: Path) -> None:
    path = FIXTURES / FILES[kind]
    records = [r for _, r in (iter_json_array(path) if kind != "musique" else
                              ((i, json.loads(line)) for i, line in enumerate(path.read_text().splitlines())))]
    mutate(records[1])
    bad = tmp_path / FILES[kind]
    bad.write_text(json.dumps(records, indent=1) if kind != "musique" else "\n".join(map(json.dumps, records)))
    with pytest.raises(InputFileError, match=message):
        load_seed_file(kind, bad)


record = st.fixed_dictionaries({"_id": st.text(max_size=5), "question": st.text(max_size=30),
                                "context": st.lists(st.lists(st.text(max_size=9), max_size=3))})


# no deadline: each example writes and reads a file, which a loaded machine can hold past 200 ms
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=5), indent=st.sampled_from([None, 0, 2]), chunk=st.integers(1, 64),
       cut=st.integers(1, 10_000))
def test_streaming_reader_round_trips_and_rejects_every_truncation(records, indent, chunk, cut, tmp_path) -> None:
    text = json.dumps(records, indent=indent, ensure_ascii=False)
    path = tmp_path / "list.json"
    path.write_text(text, encoding="utf-8")
    assert [r for _, r in iter_json_array(path, chunk_size=chunk)] == records
    path.write_text(text[: cut % len(text)], encoding="utf-8")  # any proper prefix lacks the closing bracket
    with pytest.raises(InputFileError, match="list.json"):
        list(iter_json_array(path, chunk_size=chunk))


@pytest.mark.parametrize("kind", FILES)
def test_batching_and_limit_do_not_change_rows(kind: str) -> None:
    whole, _ = load_seed_file(kind, FIXTURES / FILES[kind])
    assert load_seed_file(kind, FIXTURES / FILES[kind], batch=1)[0].equals(whole)
    assert load_seed_file(kind, FIXTURES / FILES[kind], batch=1, limit=1)[0].equals(whole.head(1))


def test_split_by_param_and_by_hash() -> None:
    path = FIXTURES / "hotpotqa.json"
    assert load_seed_file("hotpotqa", path, split="eval")[0]["split"].unique().to_list() == ["eval"]
    assert load_seed_file("hotpotqa", path, eval_fraction=0.0)[0]["split"].unique().to_list() == ["train"]
    assert load_seed_file("hotpotqa", path, eval_fraction=1.0)[0]["split"].unique().to_list() == ["eval"]
    once, again = (load_seed_file("hotpotqa", path, eval_fraction=0.5)[0] for _ in range(2))
    assert once.equals(again)


def _world_seeds() -> FrameArtifact:
    hotpot, _ = load_seed_file("hotpotqa", FIXTURES / "hotpotqa.json")
    world = hotpot.with_columns(source=pl.lit("world"), id=pl.col("id").str.replace("hotpotqa", "world"))
    return FrameArtifact({"seeds": world.with_columns(program=pl.lit("{}"))})


def test_stage_mixes_sources_and_keeps_eval_out_of_training() -> None:
    path = FIXTURES / "hotpotqa.json"
    params = qa_seeds.parse_params({"source": [f"hotpotqa:{path}@eval", f"musique:{FIXTURES / 'musique.jsonl'}",
                                               "world"]})
    out = qa_seeds.run({"world": _world_seeds()}, params, "p0")
    seeds, rejected = out["seeds"], out["rejected"]
    assert list(seeds.columns) == list(QA_SEED.columns)
    # The world copies repeat the HotpotQA questions, which are in the eval split: they are rejected.
    assert seeds.group_by("source").len().sort("source").rows() == [("hotpotqa", 3), ("musique", 2)]
    assert sorted(rejected["reason"].to_list()) == ["question also in the eval split"] * 3 + [
        "unanswerable (MuSiQue answerable=false) (musique.jsonl:2)"]
    for name, frame in out.items():
        assert validate("qa_seeds", name, frame, qa_seeds.outputs[name], "p0").passed


def test_contract_catches_an_eval_question_in_training() -> None:
    seeds, _ = load_seed_file("hotpotqa", FIXTURES / "hotpotqa.json", split="train")
    leaked = pl.concat([seeds, seeds.head(1).with_columns(id=pl.lit("copy"), split=pl.lit("eval"))])
    report = validate("qa_seeds", "seeds", leaked, seed_contract(), "p0")
    assert not report.passed and "no_eval_seed_in_train" in str(report.failures())


@pytest.mark.parametrize(("source", "message"), [
    ("squad:/x.json", "KIND:PATH"),
    ("hotpotqa:", "KIND:PATH"),
    ("hotpotqa:/x.json@dev", "must be one of train, eval"),
])
def test_bad_source_params(source: str, message: str) -> None:
    with pytest.raises(StageError, match=message):
        qa_seeds.parse_params({"source": source})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such musique file"):
        qa_seeds.run({"world": _world_seeds()}, qa_seeds.parse_params({"source": f"musique:{tmp_path}/x.jsonl"}), "p0")


def test_world_to_qa_seeds_through_the_store(tmp_path: Path) -> None:
    """Published through the artifact store (Parquet round trip, gate, cache): a re-run hits the cache."""
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from data_contracts.runner import run_serially
    from tasks.longctx import world  # noqa: F401  (registers the upstream stage)

    params = {"world": {"n_entities": 300, "n_questions": 40, "n_distractors": 1}}
    first = run_serially(open_store(tmp_path), Catalog(tmp_path), ["qa_seeds"], params, "p0", progress=False)
    assert first["qa_seeds"].outputs["seeds"] == first["world"].outputs["seeds"] > 30
    again = run_serially(open_store(tmp_path), Catalog(tmp_path), ["qa_seeds"], params, "p0", progress=False)
    assert again["qa_seeds"].cached and again["qa_seeds"].key == first["qa_seeds"].key


blank = st.text(alphabet=" \t\r\n", max_size=12)


# no deadline: each example writes a file and runs the stage on it (667 ms once on a loaded machine)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=20, deadline=None)
@given(kind=st.sampled_from(sorted(FILES)), space=blank, as_list=st.booleans())
def test_an_empty_file_is_an_error_naming_it(kind: str, space: str, as_list: bool, tmp_path: Path) -> None:
    """No records at all (nothing, blank lines, an empty JSON list) is never a 0-seed artifact."""
    path = tmp_path / FILES[kind]
    path.write_text(f"[{space}]{space}" if as_list and kind != "musique" else space)
    with pytest.raises(InputFileError, match=rf"{path.name}.*(empty|no records)"):
        load_seed_file(kind, path)
    with pytest.raises(InputFileError, match=path.name):
        qa_seeds.run({"world": _world_seeds()}, qa_seeds.parse_params({"source": f"{kind}:{path}"}), "p0")


@pytest.mark.parametrize(("kind", "unusable"), [
    ("hotpotqa", lambda r: r.update(answer="")),
    ("musique", lambda r: r.update(answerable=False)),
])
def test_a_file_whose_records_are_all_rejected_is_an_error_naming_it(kind: str, unusable, tmp_path: Path) -> None:
    path = FIXTURES / FILES[kind]
    records = ([r for _, r in iter_json_array(path)] if kind != "musique"
               else [json.loads(line) for line in path.read_text().splitlines()])
    for r in records:
        unusable(r)
    bad = tmp_path / FILES[kind]
    bad.write_text(json.dumps(records) if kind != "musique" else "\n".join(map(json.dumps, records)))
    with pytest.raises(InputFileError, match=rf"{bad.name}: all {len(records)} records were rejected"):
        load_seed_file(kind, bad)


@pytest.mark.parametrize("kind", FILES)
def test_a_file_that_is_not_utf8_is_named(kind: str, tmp_path: Path) -> None:
    bad = tmp_path / FILES[kind]
    bad.write_bytes((FIXTURES / FILES[kind]).read_bytes().replace(b'"question": "', b'"question": "\xe9', 1))
    with pytest.raises(InputFileError, match=rf"{bad.name}.*not UTF-8"):
        load_seed_file(kind, bad)


def test_a_seed_file_cut_in_place_changes_the_artifact_key(tmp_path: Path) -> None:
    """Edited in place (3 records cut to 1), the file must not be served from the cache of its old content."""
    from data_contracts.stage import get_stage
    from data_contracts.store import ArtifactStore

    path = tmp_path / "musique.jsonl"
    lines = (FIXTURES / "musique.jsonl").read_text().splitlines(keepends=True)
    path.write_text("".join(lines))
    stage = get_stage("qa_seeds")
    params = stage.parse_params({"source": f"musique:{path}"})
    before = ArtifactStore.artifact_key(stage, params, {"world": "w" * 20}, "p0")
    path.write_text("".join(lines[:1]))
    assert ArtifactStore.artifact_key(stage, params, {"world": "w" * 20}, "p0") != before
    assert params.local_inputs() == [str(path)]

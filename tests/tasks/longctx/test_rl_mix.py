"""The LoongRL mixture (Table 1) and curriculum (warm-up, Stage I, Stage II hard mining)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mix_inputs import mix_inputs

from data_contracts.stage import FrameArtifact, StageError, get_stage
from envgen.rewards import REWARDS
from tasks.longctx import rl_mix as M

AVAILABLE = {"keychain": 6, "qa": 5, "needle_multikey": 2, "needle_multivalue": 2, "math_hard": 10, "math_easy": 10}


@pytest.fixture(scope="module")
def inputs() -> dict[str, FrameArtifact]:
    return mix_inputs()


def mix(inputs, **params) -> dict[str, pl.DataFrame]:
    stage = get_stage("rl_mix")
    return stage.run(inputs, stage.parse_params(params), "p0")


def test_table_1_by_default_takes_what_is_there(inputs):
    from data_contracts.gate import validate

    out = mix(inputs)
    summary = {r["category"]: r for r in out["summary"].iter_rows(named=True)}
    assert {c: r["requested"] for c, r in summary.items()} == M.TABLE_1
    assert {c: r["taken"] for c, r in summary.items()} == AVAILABLE
    frame = out["mix"]
    assert validate("rl_mix", "mix", frame, M.MIX_CONTRACT, "p0").passed
    assert set(frame["reward_fn"]) <= set(REWARDS)
    assert mix(inputs)["mix"].equals(frame)


@settings(max_examples=20, deadline=None)
@given(counts=st.fixed_dictionaries({c: st.integers(0, 12) for c in M.TABLE_1}), seed=st.integers(0, 99))
def test_counts_are_honoured_up_to_availability(inputs, counts, seed):
    frame = mix(inputs, counts=counts, seed=seed, curriculum=["stage1"])["mix"]
    taken = dict(frame.group_by("category").len().iter_rows())
    assert {c: taken.get(c, 0) for c in M.TABLE_1} == {c: min(n, AVAILABLE[c]) for c, n in counts.items()}


def test_scale_multiplies_counts(inputs):
    summary = mix(inputs, scale=0.001)["summary"]
    assert dict(summary.select("category", "requested").iter_rows()) == {
        c: round(n * 0.001) for c, n in M.TABLE_1.items()}


def test_curriculum_stages(inputs):
    frame = mix(inputs)["mix"]
    by_stage = {s: frame.filter(pl.col("curriculum_stage") == s) for s in M.CURRICULUM}
    assert "keychain" not in set(by_stage["warmup"]["category"])
    assert set(by_stage["stage1"]["id"]) == set(by_stage["warmup"]["id"]) | set(
        frame.filter(pl.col("category") == "keychain")["id"])
    assert set(by_stage["stage2"]["id"]) <= set(by_stage["stage1"]["id"])
    skip = mix(inputs, curriculum=["stage1", "stage2"])["mix"]  # the 14B recipe: no warm-up
    assert set(skip["curriculum_stage"]) == {"stage1", "stage2"}


def test_stage_two_drops_items_solved_in_every_rollout(inputs, tmp_path):
    stage1 = mix(inputs, curriculum=["stage1"])["mix"]
    ids = stage1["id"].to_list()
    solved, partly = ids[:5], ids[5:8]
    table = pl.DataFrame({"id": solved + partly, "pass_count": [8] * 5 + [7, 0, 3], "k": [8] * 8})
    table.write_parquet(tmp_path / "pass.parquet")
    stage2 = mix(inputs, curriculum=["stage2"], pass_table=str(tmp_path / "pass.parquet"))["mix"]
    assert set(stage2["id"]) == set(ids) - set(solved)


def test_stage_two_uses_pass_counts_on_the_rows_by_default(inputs):
    kc = inputs["keychain"].read("keychain")
    solved = kc.with_columns(pl.when(pl.int_range(pl.len()) < 2).then(pl.col("pass_k")).otherwise("pass_count")
                             .alias("pass_count"))
    changed = {**inputs, "keychain": FrameArtifact({**inputs["keychain"].frames, "keychain": solved})}
    frame = mix(changed, curriculum=["stage2"])["mix"]
    assert set(frame.filter(pl.col("category") == "keychain")["source_id"]) == set(solved["seed_id"][2:])


@pytest.mark.parametrize(("qa_source", "n_qa"), [("long", 5), ("short", 18)])
def test_rows_are_ready_for_grpo(inputs, qa_source, n_qa):
    frame = mix(inputs, curriculum=["stage1"], qa_source=qa_source)["mix"]
    for row in frame.iter_rows(named=True):
        messages = json.loads(row["prompt"])
        assert messages[-1]["role"] == "user" and "\\boxed{" in messages[-1]["content"]
    qa = frame.filter(pl.col("category") == "qa")
    assert qa.height == n_qa
    assert not set(qa["source_id"]) & set(inputs["keychain"].read("keychain")["seed_id"])


@pytest.mark.parametrize(("raw", "field"), [
    ({"counts": {"poetry": 3}}, "counts"), ({"curriculum": ["stage3"]}, "curriculum"),
    ({"curriculum": ["stage1", "stage1"]}, "curriculum"), ({"pass_table": "/no/file.parquet"}, "pass_table"),
])
def test_bad_params_name_the_field(raw, field):
    with pytest.raises(StageError, match=field):
        get_stage("rl_mix").parse_params(raw)


def test_an_empty_pass_table_is_refused(tmp_path: Path) -> None:
    from tasks.longctx.rl_mix import solved_in_all

    table = tmp_path / "pass.parquet"
    pl.DataFrame(schema={"id": pl.String, "pass_count": pl.Int64, "k": pl.Int64}).write_parquet(table)
    items = pl.DataFrame({"id": ["a"], "pass_count": [8], "pass_k": [8]})
    with pytest.raises(ValueError, match="holds no rows"):
        solved_in_all(items, str(table))

"""research_trajectories: teacher runs on research tasks, journaled (a second run replays the journal without the
teacher), exported as trajectory rows that pass their contract, runs and calls kept distinct by status."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from longctx_fixtures import tokenizer_artifact
from research_fixtures import index_dir, small_world

from data_contracts.gate import validate
from data_contracts.stage import FrameArtifact
from tasks.research.harness.reference import ReferenceTeacher
from tasks.research.research_tasks import research_tasks
from tasks.research.research_trajectories import research_trajectories


def inputs() -> dict[str, FrameArtifact]:
    world = FrameArtifact(small_world())
    index = FrameArtifact({}, directory=Path(index_dir()))
    tasks = research_tasks.run({"world": world, "search_index": index}, research_tasks.parse_params({"n": 6}), "p0")
    return {"research_tasks": FrameArtifact(tasks), "search_index": index, "world": world,
            "tokenizer": tokenizer_artifact()}


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("journal")


@pytest.fixture(scope="module")
def out(journal: Path) -> dict[str, pl.DataFrame]:
    params = research_trajectories.parse_params({"max_tasks": 2, "journal_dir": str(journal)})
    return research_trajectories.run(inputs(), params, "p0")


def test_runs_are_exported_as_trajectories_that_pass_their_contracts(out) -> None:
    for name, frame in out.items():
        report = validate("research_trajectories", name, frame, research_trajectories.outputs[name], "p0")
        assert report.passed, report.summary()
    runs, calls, trajectories = out["runs"], out["calls"], out["trajectories"]
    assert runs.height == 2 and set(runs["status"]) <= {"complete", "partial", "failed"}
    assert (runs["citation_support"] >= 0.9).all() and runs["rubric_score"].is_not_null().all()
    assert set(trajectories["id"]) == set(calls.filter(pl.col("kept"))["id"])
    assert set(calls["teacher"]) == {"reference"} and calls["harness"].n_unique() == 1
    for row in trajectories.iter_rows(named=True):
        messages = json.loads(row["messages"])
        assert row["train"] == [m["role"] == "assistant" for m in messages] and row["verified"]
        assert json.loads(row["verify_input"])["role"] in row["verifier"]
    researchers = calls.filter(pl.col("role") == "researcher")
    assert researchers["branch"].is_not_null().all() and (researchers["depends_on"].list.len() == 1).all()


def test_a_second_run_replays_the_journal_without_the_teacher(out, journal: Path, monkeypatch) -> None:
    assert len(list(journal.glob("run-*.jsonl"))) == 2

    def no_teacher(self, requests):
        raise AssertionError("the teacher was asked again")

    monkeypatch.setattr(ReferenceTeacher, "generate", no_teacher)
    params = research_trajectories.parse_params({"max_tasks": 2, "journal_dir": str(journal)})
    again = research_trajectories.run(inputs(), params, "p0")
    assert all(out[name].equals(again[name]) for name in out)


def test_research_trajectories_carry_tokens_and_are_an_sft_route(out) -> None:
    from envgen.trajectory_checks import verify_row
    from tasks.midtrain.sft_set import ROUTES

    rows = out["trajectories"]
    assert rows.height and rows["tokens"].null_count() == 0 and rows["tokens"].min() > 0
    assert ROUTES["research_trajectories"] == "research"
    for row in rows.head(5).iter_rows(named=True):  # sft_set re-verifies them by their tool calls
        assert verify_row(row) is None


def test_sft_set_fits_research_trajectories_by_step_compression(out) -> None:
    """A research call over the window comes back step-compressed: earlier results summarized, the earliest steps
    folded into the request, the final answer and the calls' closure kept, and it still verifies."""
    from envgen.trajectory_checks import SUMMARY_TAG, verify_row
    from tasks.midtrain.sft_set import SFTSetParams, _admit
    from tasks.midtrain.trajectory_stages import token_counter

    count = token_counter(SFTSetParams(), {"tokenizer": tokenizer_artifact()})
    rows = list(out["trajectories"].iter_rows(named=True))
    stepped = [r for r in rows if sum(m["role"] == "tool" for m in json.loads(r["messages"])) >= 2]
    assert stepped
    folded = 0
    for row, share in ((r, s) for r in rows for s in (0.6, None)):
        params = SFTSetParams(max_tokens=int(share * row["tokens"]) if share else row["tokens"] - 1)
        admitted, reason = _admit(row, params, count)
        if row not in stepped:  # a call without tool steps (an editor's) has nothing to compress
            assert admitted is None and reason.startswith("too_long"), reason
            continue
        if share and admitted is None:  # its request and answer alone may outgrow 60% of it
            assert reason.endswith("also after step compression"), reason
            continue
        assert reason is None, reason
        folded += json.loads(admitted["transform_settings"])["folded_steps"] > 0
        messages, original = json.loads(admitted["messages"]), json.loads(row["messages"])
        assert admitted["transform"] == "compress" and admitted["parent_id"] == row["id"]
        assert count(messages, json.loads(row["tools"])) == admitted["tokens"] <= params.max_tokens
        assert messages[-1] == original[-1] and any(SUMMARY_TAG in str(m["content"]) for m in messages)
        answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
        assert answered == {c["id"] for m in messages for c in m.get("tool_calls") or []}
        assert verify_row(admitted) is None
    assert folded  # some call fits 60% of its length only with its earliest steps folded

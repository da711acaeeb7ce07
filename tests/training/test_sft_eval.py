"""Held-out scoring: the change of validity with an interval over trajectories, the evaluation table that shows it,
and the first call kept whole when decoding stops at its closing tag."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.train import evaluation_table
from inference.hf_engine import RowOutput
from training.records import TRAINING_METRIC
from training.sft_eval import TOOL_CALL_END, CallTurn, _with_stop, change_interval


def turns_of(sizes: list[int]) -> list[CallTurn]:
    return [CallTurn((), (), "f", {}, f"t{t}") for t, size in enumerate(sizes) for _ in range(size)]


def valid(flags: list[bool]) -> list[dict[str, bool]]:
    return [{"tool_call_valid": flag} for flag in flags]


@given(st.lists(st.integers(1, 6), min_size=1, max_size=12), st.data())
def test_the_change_is_the_pooled_difference_and_lies_in_its_interval(sizes, data):
    turns = turns_of(sizes)
    before = data.draw(st.lists(st.booleans(), min_size=len(turns), max_size=len(turns)))
    after = data.draw(st.lists(st.booleans(), min_size=len(turns), max_size=len(turns)))
    change = change_interval(valid(before), valid(after), turns, resamples=200)
    assert change["change"] == pytest.approx((sum(after) - sum(before)) / len(turns))
    assert -1 <= change["change_low"] <= change["change"] + 1e-12 <= change["change_high"] + 2e-12 <= 1 + 2e-12


def test_an_improvement_on_every_turn_excludes_zero_and_one_lucky_trajectory_does_not():
    turns = turns_of([3] * 8)
    everywhere = change_interval(valid([False] * 24), valid([True] * 24), turns)
    assert everywhere == {"change": 1.0, "change_low": 1.0, "change_high": 1.0}
    # one trajectory of 8 gains all three turns: resampling trajectories, not turns, keeps 0 inside the interval
    lucky = change_interval(valid([False] * 24), valid([True] * 3 + [False] * 21), turns)
    assert lucky["change"] == pytest.approx(3 / 24) and lucky["change_low"] == 0.0


def test_the_evaluation_table_shows_the_change_beside_its_figure():
    rows = [(0, "tool_call_valid", 0.1), (0, "loss", 2.0), (30, "tool_call_valid", 0.6), (30, "loss", 1.0),
            (30, "tool_call_valid_change", 0.5), (30, "tool_call_valid_change_low", 0.3),
            (30, "tool_call_valid_change_high", 0.7)]
    metrics = TRAINING_METRIC.frame([{"step": s, "split": "eval", "name": n, "value": v} for s, n, v in rows])
    table = {row["figure"]: row for row in evaluation_table(metrics)}
    assert set(table) == {"loss", "tool_call_valid"}
    assert table["tool_call_valid"]["change [95% CI]"] == "+0.500 [+0.300, +0.700]"
    assert table["loss"]["change [95% CI]"] == "" and table["loss"]["step 30"] == 1.0
    plain = evaluation_table(metrics.filter(~pl.col("name").str.contains("change")))
    assert all("change [95% CI]" not in row for row in plain)  # a run that measured no change shows none


@pytest.mark.parametrize(("finish", "last", "expected"), [
    ("stop", 7, '<tool_call>{"name": "f"}' + TOOL_CALL_END),  # cut by the stop string: the tag goes back
    ("stop", 2, "<tool_call>{"),  # ended by the end-of-turn token: nothing was cut
    ("length", 7, "<tool_call>{"),  # out of tokens
])
def test_the_closing_tag_that_stopped_decoding_is_put_back(finish, last, expected):
    text = expected.removesuffix(TOOL_CALL_END)
    sample = RowOutput(token_ids=[5, last], finish_reason=finish, text=text)
    assert _with_stop(sample, frozenset({2})) == expected

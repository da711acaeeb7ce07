"""RULER-style needles (LoongRL Table 1): values stated exactly as the answer columns say, length window, reward."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from longctx_fixtures import tokenizer, tokenizer_artifact, world_documents

from data_contracts.stage import FrameArtifact, StageError, get_stage
from envgen.rewards import get_reward
from tasks.longctx import needles as N

SMALL = {"n_multikey": 3, "n_multivalue": 3, "target_tokens": 1536}


def run(params: dict | None = None) -> dict[str, pl.DataFrame]:
    stage = get_stage("needles")
    inputs = {"world": FrameArtifact({"documents": world_documents()}), "tokenizer": tokenizer_artifact()}
    return stage.run(inputs, stage.parse_params({**SMALL, **(params or {})}), "p0")


@pytest.fixture(scope="module")
def default_run() -> dict[str, pl.DataFrame]:
    return run()


def content(row: dict) -> str:
    return json.loads(row["prompt"])[0]["content"]


def test_rows_pass_the_contract_and_are_deterministic(default_run):
    from data_contracts.gate import validate

    frame = default_run["needles"]
    assert frame["task"].to_list() == ["multikey"] * 3 + ["multivalue"] * 3
    assert validate("needles", "needles", frame, N.NEEDLE_CONTRACT, "p0").passed
    assert run()["needles"].equals(frame)


def test_every_queried_value_is_present_exactly_as_stated(default_run):
    for row in default_run["needles"].iter_rows(named=True):
        text = content(row)
        stated = re.findall(r"One of the special magic numbers for (\S+) is: (\d+)\.", text)
        by_key: dict[str, list[str]] = {}
        for key, value in stated:
            by_key.setdefault(key, []).append(value)
        assert sorted(by_key[row["query_key"]]) == sorted(row["answers"])
        assert json.loads(row["answer"]) == row["answers"]
        if row["task"] == "multikey":
            assert len(by_key) == 20 and all(len(v) == 1 for v in by_key.values()) and len(row["answers"]) == 1
        else:
            assert list(by_key) == [row["query_key"]] and len(row["answers"]) == 20
        assert row["query_key"] in text.rsplit("\n\n", 1)[1]  # the question names the key


def test_length_is_measured_on_the_final_templated_prompt(default_run):
    tok = tokenizer()
    for row in default_run["needles"].iter_rows(named=True):
        n = len(tok.apply_chat_template(json.loads(row["prompt"]), add_generation_prompt=True, return_dict=False))
        assert n == row["tokens"] and 0.98 * SMALL["target_tokens"] <= n <= SMALL["target_tokens"]


def test_the_multi_value_reward_reads_the_answer_columns(default_run):
    reward = get_reward("needle_all")
    frame = default_run["needles"]
    right = [f"\\boxed{{{', '.join(reversed(a))}}}" for a in frame["answers"]]
    partial = [f"\\boxed{{{a[0]}}}" for a in frame["answers"]]
    assert reward(right, answer=frame["answer"].to_list()) == [1.0] * frame.height
    scores = reward(partial, answer=frame["answer"].to_list())
    assert scores == [1.0 if t == "multikey" else 0.0 for t in frame["task"]]


@settings(max_examples=8, deadline=None)
@given(target=st.integers(1024, 2560), n_keys=st.integers(1, 30), key_type=st.sampled_from(["words", "numbers"]),
       seed=st.integers(0, 10_000))
def test_any_setting_stays_in_window_and_states_its_needles(target, n_keys, key_type, seed):
    out = run({"target_tokens": target, "n_keys": n_keys, "n_values": n_keys, "key_type": key_type, "seed": seed,
               "n_multikey": 1, "n_multivalue": 1})
    frame = out["needles"]
    assert frame.height + out["rejected"].height == 2
    assert not any(any(c.fn(frame)) for c in N.NEEDLE_CONTRACT.checks)


def test_a_text_directory_is_a_haystack(tmp_path):
    paragraphs = world_documents()["text"].to_list()
    (tmp_path / "book.txt").write_text("\n\n".join(paragraphs))
    frame = run({"base": str(tmp_path), "n_multikey": 1, "n_multivalue": 1})["needles"]
    assert frame.height == 2 and set(frame["base"]) == {str(tmp_path)}


@pytest.mark.parametrize(("raw", "field"), [({"base": "/missing"}, "base"), ({"target_tokens": 5}, "target_tokens"),
                                            ({"key_type": "emoji"}, "key_type")])
def test_bad_params_name_the_field(raw, field):
    with pytest.raises(StageError, match=field):
        get_stage("needles").parse_params(raw)


def test_on_real_world_documents():
    from longctx_fixtures import real_world

    world, tok = real_world()
    stage = get_stage("needles")
    frame = stage.run({"world": world, "tokenizer": tok}, stage.parse_params(SMALL), "p0")["needles"]
    assert frame.height == 6 and not any(any(c.fn(frame)) for c in N.NEEDLE_CONTRACT.checks)

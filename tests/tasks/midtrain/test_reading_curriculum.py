"""reading_curriculum: every row's chain resolves to its boxed answer, stated once, within the length window; a
broken row fails the contract."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import example, given, settings
from hypothesis import strategies as st
from longctx_fixtures import tokenizer_artifact, world_documents

from data_contracts.gate import validate
from data_contracts.stage import FrameArtifact, get_stage
from tasks.midtrain import reading_curriculum as R


def run(params: dict) -> dict[str, pl.DataFrame]:
    stage = get_stage(R.STAGE)
    inputs = {"world": FrameArtifact({"documents": world_documents()}), "tokenizer": tokenizer_artifact()}
    return stage.run(inputs, stage.parse_params(params), "p0")


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), target=st.integers(768, 1536), distractors=st.integers(0, 3),
       answer=st.sampled_from(["direct", "trace"]))
@example(seed=768, target=781, distractors=1, answer="direct")  # once left a sliver of room no document fit
def test_every_chain_resolves_to_the_answer_stated_once_in_window(seed, target, distractors, answer):
    out = run({"n_per_level": 1, "seed": seed, "target_tokens": target, "distractor_chains": distractors,
               "answer": answer})
    frame = out["trajectories"]
    assert frame.height + out["rejected"].height == 3 and frame.height >= 2
    assert validate(R.STAGE, "trajectories", frame, get_stage(R.STAGE).outputs["trajectories"], "p0").passed
    for row in frame.iter_rows(named=True):
        user, reply = (m["content"] for m in json.loads(row["messages"]))
        vi = json.loads(row["verify_input"])
        assert R.resolve(user, vi["key_format"]) == (vi["chain"], vi["answer"])
        assert len(vi["chain"]) == R.LEVELS[row["domain"]] and user.count(vi["answer"]) == 1
        assert f"\\boxed{{{vi['answer']}}}" in reply
        assert 0.98 * target <= vi["prompt_tokens"] <= target


def test_different_seeds_differ_and_one_seed_repeats():
    a, b = (run({"n_per_level": 1, "seed": s})["trajectories"] for s in (0, 1))
    assert a["messages"].to_list() != b["messages"].to_list()
    assert run({"n_per_level": 1, "seed": 0})["trajectories"].equals(a)


def test_a_broken_row_fails_the_contract():
    frame = run({"n_per_level": 1})["trajectories"]
    row = frame.row(2, named=True)  # two_hop
    vi = json.loads(row["verify_input"])
    messages = json.loads(row["messages"])
    messages[0]["content"] = messages[0]["content"].replace(f"{vi['chain'][1]}: ", "", 1)  # a link cut out
    broken = frame.with_columns(pl.Series("messages", [*frame["messages"][:2], json.dumps(messages)]))
    failing = [c.name for c in R.READING_CHECKS if any(c.fn(broken))]
    assert "chain_resolves" in failing
    user = json.loads(frame.row(0, named=True)["messages"])
    passages, sep, question = user[0]["content"].rpartition("\n\n")
    user[0]["content"] = passages + " Maria S. Huff is employed" + sep + question  # a cut at a word
    cut = frame.with_columns(pl.Series("messages", [json.dumps(user), *frame["messages"][1:]]))
    assert [*next(c for c in R.READING_CHECKS if c.name == "passages_end_at_sentences").fn(cut)] == [True, False, False]
    relabelled = frame.with_columns(pl.Series("domain", ["one_hop"] * frame.height))
    assert any(next(c for c in R.READING_CHECKS if c.name == "level_labelled").fn(relabelled))

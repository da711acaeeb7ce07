"""midtrain_longctx on the world and KeyChain stages' real outputs: answers that follow every key and state every
condition, gated; an answer that skips a key or a condition does not re-verify."""

from __future__ import annotations

import json

import polars as pl
from longctx_fixtures import real_world

from data_contracts.gate import validate
from data_contracts.stage import FrameArtifact, get_stage
from envgen.trajectory_checks import verify_row


def test_keychain_and_qa_answers_follow_every_key_and_condition() -> None:
    import tasks.longctx.keychain  # noqa: F401  (registers the stage)
    import tasks.midtrain.midtrain_longctx as stage

    world, tok = real_world()
    seeds = world.read("seeds").filter(pl.col("split") == "train").with_columns(
        pl.lit(4).alias("pass_count"), pl.lit(8).alias("pass_k"))
    keychain = get_stage("keychain")
    chains = keychain.run({"qa_filtered": FrameArtifact({"seeds": seeds, "rejected": seeds.head(0).with_columns(
        pl.lit("").alias("reason"))}), "tokenizer": tok}, keychain.parse_params(
        {"n": 3, "target_tokens": 1280, "hops": 2}), "p0")["keychain"]
    inputs = {"world": world, "tokenizer": tok, "keychain": FrameArtifact({"keychain": chains})}
    out = stage.midtrain_longctx.run(inputs, stage.midtrain_longctx.parse_params({"n_keychain": 3, "n_qa": 4}), "t")
    kept = out["trajectories"]
    assert validate(stage.STAGE, "trajectories", kept, stage.midtrain_longctx.outputs["trajectories"], "t").passed
    assert set(kept["domain"]) == {"keychain", "qa"} and kept.height + out["rejected"].height == chains.height + 4
    row = kept.filter(pl.col("domain") == "keychain").row(0, named=True)
    answer = json.loads(row["messages"])[-1]["content"]
    keys = json.loads(row["verify_input"])["conditions"]
    assert all(k in answer for k in keys)  # every key of the chain and every condition, stated
    for dropped in keys[:1] + keys[-1:]:  # skipping the first key or the last condition is caught
        messages = json.loads(row["messages"])
        messages[-1]["content"] = answer.replace(dropped, "")
        assert "leaves out" in verify_row({**row, "messages": json.dumps(messages)})

    direct = stage.midtrain_longctx.run(inputs, stage.midtrain_longctx.parse_params(
        {"n_keychain": 3, "n_qa": 4, "answer": "direct"}), "t")["trajectories"]
    assert direct["id"].to_list() == kept["id"].to_list()  # the same items, with the boxed answer alone
    for row in direct.iter_rows(named=True):
        final = json.loads(row["messages"])[-1]["content"]
        assert final == f"\\boxed{{{json.loads(row['verify_input'])['answer']}}}" and verify_row(row) is None

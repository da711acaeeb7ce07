"""The trajectory contract every mid-training route is gated by: a kept row passes, and each way a row can be wrong
fails the check that names it, on that row only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from midtrain_fixtures import env_trajectories

from data_contracts.gate import validate
from tasks.midtrain.trajectory_stages import trajectory_contract

CONTRACT = trajectory_contract(["midtrain_env"])


def _forge_result(row: dict[str, Any]) -> None:
    messages = json.loads(row["messages"])
    tool = next(m for m in messages if m["role"] == "tool")
    tool["content"] = json.dumps({"ok": True, "forged": 1})
    row["messages"] = json.dumps(messages)


def _train_the_user(row: dict[str, Any]) -> None:
    messages = json.loads(row["messages"])
    row["train"] = [flag or m["role"] == "user" for flag, m in zip(row["train"], messages, strict=True)]


def _call_unknown_tool(row: dict[str, Any]) -> None:
    messages = json.loads(row["messages"])
    i = next(i for i, m in enumerate(messages) if m.get("tool_calls") and row["train"][i])
    messages[i]["tool_calls"][0]["function"]["name"] = "launch_rocket"
    row["messages"] = json.dumps(messages)


def _too_long(row: dict[str, Any]) -> None:
    row["tokens"] = json.loads(row["verify_input"])["limits"]["max_tokens"] + 1


def _heldout(row: dict[str, Any]) -> None:
    row["domain"] = json.loads(row["verify_input"])["limits"]["heldout"][0]


def _orphan(row: dict[str, Any]) -> None:
    row["parent_id"] = "somewhere"


CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "forged tool result": (_forge_result, "reverifies"),
    "trained user turn": (_train_the_user, "masks_on_assistant_turns"),
    "call to a tool not offered": (_call_unknown_tool, "tool_calls_valid"),
    "over the token window": (_too_long, "within_limits"),
    "held-out domain": (_heldout, "within_limits"),
    "parent without transform": (_orphan, "lineage_consistent"),
}


def test_kept_rows_pass_the_contract() -> None:
    report = validate("midtrain_env", "trajectories", env_trajectories().head(3), CONTRACT, "t")
    assert report.passed, report.summary()


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_defect_fails_the_check_that_names_it(case: str) -> None:
    corrupt, check = CASES[case]
    rows = env_trajectories().head(3).to_dicts()
    corrupt(rows[1])
    frame = pl.DataFrame(rows, schema=env_trajectories().schema)
    report = validate("midtrain_env", "trajectories", frame, CONTRACT, "t")
    assert not report.passed
    assert check in {r.name for r in report.failures("critical")}, report.summary()
    assert report.failing_rows == [1]


def test_a_played_episode_with_a_needless_read_is_set_aside_with_its_reason() -> None:
    import random

    from tasks.midtrain.midtrain_env import MidtrainEnvParams
    from tasks.midtrain.synth import ReferenceEpisode, episode_of
    from tasks.midtrain.trajectory_stages import episode_rows, open_teacher

    # the customer identified by email, then their card blocked: a second identical lookup has no reason
    episode = episode_of(env_trajectories().filter(pl.col("id") == "midtrain_env:t:000003/0").row(0, named=True))
    second_look = ReferenceEpisode(episode.env, episode.task, [episode.calls[0], *episode.calls])
    params = MidtrainEnvParams()
    teacher = open_teacher(params)
    try:
        rows, rejected = episode_rows([("plain", episode, {"rng": random.Random(0)}),
                                       ("twice", second_look, {"rng": random.Random(0)})],
                                      params, "midtrain_env", lambda messages, tools: 10, teacher)
    finally:
        teacher.close()
    assert [r["id"] for r in rows] == ["plain"]
    assert [r["id"] for r in rejected] == ["twice"] and rejected[0]["reason"].startswith("no_needless_read: ")

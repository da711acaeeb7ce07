"""`gymforge demo`'s SFT step: it trains the refresh's tiny policy on the cold-start set (the small environments'
trajectories when there is none), and says in one line why it skips when the refresh published neither."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flows.train
from flows.cli import train as cli_train


class Runtime:
    root = Path("/data")


def row(stage: str, status: str = "published") -> dict[str, Any]:
    return {"stage": stage, "key": f"{stage}-key", "status": status}


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """train_sft replaced by a recorder (the flow itself runs in tests/flows/test_train.py)."""
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(flows.train, "train_sft", lambda **kwargs: seen.append(kwargs) or {"result": True})
    monkeypatch.setattr(cli_train, "print_result", lambda result: seen.append(result))
    return seen


@pytest.mark.parametrize(("summary", "data"), [
    ([row("tiny_policy"), row("small_envs"), row("sft_set", "cached")], "small_envs-key"),
    ([row("small_envs", "quarantined"), row("tiny_policy", "cached"), row("sft_set")], "sft_set-key"),
])
def test_the_demo_trains_the_tiny_policy_on_golden_trajectories_else_the_cold_start_set(calls, summary, data):
    cli_train.demo_sft(Runtime(), summary, "tiny", "default")
    assert calls == [{"data": [data], "base": "tiny_policy-key", "profile": "tiny", "partition": "default",
                      "data_dir": "/data", "overrides": cli_train.DEMO_SFT}, {"result": True}]


def test_the_demo_recipe_is_the_tiny_profiles_only(calls):
    cli_train.demo_sft(Runtime(), [row("tiny_policy"), row("small_envs")], "default", "default")
    assert calls[0]["profile"] == "default" and calls[0]["overrides"] is None  # a GPU profile keeps its own sft


@pytest.mark.parametrize("summary", [[row("tiny_policy")], [row("sft_set"), row("tiny_policy", "failed")]])
def test_the_demo_says_why_it_skips_sft(calls, summary, capsys):
    cli_train.demo_sft(Runtime(), summary, "tiny", "default")
    assert calls == []
    assert "sft skipped: the refresh published no small_envs or sft_set and tiny_policy" in capsys.readouterr().out

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


def test_a_pretrained_base_is_imported_and_trained_with_adapters(calls, monkeypatch, tmp_path):
    gguf = tmp_path / "base.gguf"
    gguf.write_bytes(b"GGUF")
    imported: list[str] = []
    monkeypatch.setattr(cli_train, "import_base", lambda base, root: imported.append(base) or "0123456789abcdef0123")
    cli_train.demo_sft(Runtime(), [row("small_envs")], "tiny", "default", base=str(gguf))  # no tiny policy needed
    assert imported == [str(gguf)]
    assert calls[0]["base"] == "0123456789abcdef0123" and calls[0]["data"] == ["small_envs-key"]
    assert calls[0]["overrides"] is cli_train.DEMO_PRETRAINED_SFT and calls[0]["overrides"]["lora"]


def test_a_model_key_is_trained_as_it_is(calls):
    cli_train.demo_sft(Runtime(), [row("small_envs")], "tiny", "default", base="0123456789abcdef0123")
    assert calls[0]["base"] == "0123456789abcdef0123"


@pytest.mark.parametrize(("name", "said"), [
    ("weights.bin", "give a .gguf file or a transformers directory"),
    ("missing-model", "is no file or directory, and no model artifact key"),
])
def test_a_base_that_is_neither_a_checkpoint_nor_a_key_is_refused_before_anything_runs(tmp_path, name, said):
    import typer

    if name.endswith(".bin"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(typer.BadParameter, match=said):
        cli_train.check_base(str(tmp_path / name) if name.endswith(".bin") else name)
    cli_train.check_base("0123456789abcdef0123")  # a key passes; the catalog is read when it trains

"""`gymforge midtrain` and `gymforge select`: bad input is one clear error before anything starts, nothing written."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from data_contracts.stage import StageError
from flows.cli import app
from flows.cli.midtrain import route_overrides


@pytest.mark.parametrize(("routes", "message"), [("env,bogus", "bogus"), ("", "no route was given"),
                                                 (" , ", "no route was given")])
def test_an_unknown_or_missing_route_is_refused(tmp_path, routes: str, message: str) -> None:
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["midtrain", "--routes", routes,
                                                            "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and message in result.output
    assert not (tmp_path / "out").exists()


def test_a_dead_teacher_is_one_line_and_nothing_is_written(tmp_path) -> None:
    result = CliRunner().invoke(app, ["midtrain", "--routes", "env", "--teacher", "openai:http://127.0.0.1:9/v1#m",
                                      "--out", str(tmp_path / "out")])
    # `gymforge` (flows.cli.main) prints a TeacherError, a StageError, as one "error:" line
    assert isinstance(result.exception, StageError)
    assert "teacher openai:http://127.0.0.1:9/v1#m is unreachable" in str(result.exception)
    assert not (tmp_path / "out").exists()


def test_select_names_what_it_can_select_from(tmp_path) -> None:
    result = CliRunner().invoke(app, ["select", "--in", "nope", "--k", "3", "--data-dir", str(tmp_path)])
    assert result.exit_code != 0 and "sft_set" in result.output and "no artifact 'nope'" in result.output


def test_a_keyed_selection_reads_that_artifact_and_its_parents_and_selects_its_route(monkeypatch, tmp_path) -> None:
    from types import SimpleNamespace

    import data_contracts.runner
    import flows.cli.midtrain as cli
    import flows.train

    found = SimpleNamespace(stage="midtrain_decompose", key="K1",
                            manifest={"input_keys": {"midtrain_env": "E1", "tokenizer": "T1"}})
    monkeypatch.setattr(flows.train, "published", lambda catalog, store, ref: found)
    monkeypatch.setattr(cli, "_materialize_with_progress", lambda *args: {"tiny_policy": SimpleNamespace(key="P1")})
    seen = {}

    def execute(store, catalog, stage, params, keys, partition):
        seen.update(stage=stage, params=params, keys=keys)
        return SimpleNamespace(key="S1")

    monkeypatch.setattr(data_contracts.runner, "execute_stage", execute)
    cli.keyed_selection("K1", {"k": 3}, "tiny", tmp_path)
    assert seen["keys"] == {"midtrain_decompose": "K1", "midtrain_env": "E1", "tokenizer": "T1", "tiny_policy": "P1"}
    assert seen["stage"].name == "sft_set" and set(seen["stage"].inputs) == set(seen["keys"])
    assert seen["params"].proportions == {"decompose": 1.0} and seen["params"].k == 3
    found.stage = "keychain"
    with pytest.raises(typer.BadParameter, match="no mid-training route"):
        cli.keyed_selection("K1", {"k": 3}, "tiny", tmp_path)


def test_augmentation_routes_bring_their_parent_and_the_teacher() -> None:
    overrides = route_overrides(["plan"], 5, "openai:http://h/v1#m")
    assert overrides == {"midtrain_plan": {"teacher": "openai:http://h/v1#m"},
                         "midtrain_env": {"n_tasks": 5, "teacher": "openai:http://h/v1#m"}}


def test_a_corrupt_environment_bundle_is_refused_before_anything_starts(tmp_path) -> None:
    from envgen.bundle import BUNDLE_FILES

    bundle = tmp_path / "envs" / "airline-0"
    bundle.mkdir(parents=True)
    for name in BUNDLE_FILES:
        (bundle / name).write_text("{}\n")
    (bundle / "env.json").write_text("{truncated")
    args = ["midtrain", "--routes", "env,decompose", "--envs", str(tmp_path / "envs"), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "env.json" in result.output and "invalid JSON" in result.output
    assert not (tmp_path / "out").exists()
    text_only = CliRunner().invoke(app, ["midtrain", "--routes", "text", "--envs", str(tmp_path / "envs"),
                                         "--out", str(tmp_path / "out")])
    assert text_only.exit_code != 0 and "--envs" in text_only.output


def test_bundles_reach_midtrain_env_only() -> None:
    overrides = route_overrides(["reason", "text"], None, None, "/b")
    assert overrides == {"midtrain_env": {"bundles": "/b"}}


def test_select_probes_its_reference_before_anything_starts(tmp_path) -> None:
    dead = CliRunner().invoke(app, ["select", "--in", "sft_set", "--k", "3", "--reference",
                                    "openai:http://127.0.0.1:9/v1#m", "--data-dir", str(tmp_path / "data")])
    assert dead.exit_code != 0 and "unreachable" in dead.output and not (tmp_path / "data").exists()
    bogus = CliRunner().invoke(app, ["select", "--in", "sft_set", "--k", "3", "--reference", "gpt:x"])
    assert bogus.exit_code != 0 and "openai:URL#MODEL" in bogus.output

"""What the commands print, as a new user reads it: tables whole in a pipe, model artifacts told apart, a manifest as
tables, a filter that matches nothing explained, a stage's params listed on request, `--set` with dotted names, and a
published artifact exported without a server or a flow run."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest
from rich.table import Table
from sft_fixtures import micro_base
from typer.testing import CliRunner

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from flows.cli import app

EXPORTED = ("GYMFORGE_DATA", "PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS", "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL",
            "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS")


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch):
    for name in EXPORTED:
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()  # stdout is no terminal here: what a pipe gets
    return lambda *args: runner.invoke(app, [str(arg) for arg in args])


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A data root with a data artifact and an SFT model artifact trained from a micro base."""
    from sft_fixtures import double_trajectories

    from training.sft import SFTParams, sft

    data = tmp_path_factory.mktemp("output") / "data"
    store, catalog = open_store(data), Catalog(data)
    trajectories = execute_stage(store, catalog, double_trajectories, {}, {}, "p0").key
    base = micro_base(data.parent / "micro")
    params = SFTParams(model_name_or_path=str(base), max_steps=2, learning_rate=1e-2, use_cpu=True, max_length=1024,
                       eval_tool_calls=1, save_steps=2)
    model = execute_stage(store, catalog, sft.with_inputs(["test_double_trajectories"]), params,
                          {"test_double_trajectories": trajectories}, "p0").key
    return data, trajectories, model


def test_a_table_in_a_pipe_keeps_its_headers_and_cells_whole() -> None:
    from rich.console import Console

    from flows.terminal import print_table

    table = Table()
    table.add_column("variant", width=3)
    table.add_column("key")
    table.add_row("noise_level_4", "k" * 150)
    console = Console(file=(out := io.StringIO()), width=80, force_terminal=False)
    print_table(console, table)
    assert "variant" in out.getvalue() and "k" * 150 in out.getvalue() and "…" not in out.getvalue()


def test_models_are_listed_with_base_steps_metric_and_date(cli, root) -> None:
    data, _, model = root
    result = cli("--data-dir", data, "artifacts", "ls", "--kind", "model")
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "final metric" in line)
    assert header.split() == ["stage", "key", "base", "steps", "final", "metric", "published", "partition", "status"]
    row = next(line for line in result.output.splitlines() if model in line)
    assert "micro" in row and " 2 " in row and "eval loss" in row and "published" in row
    assert "20" in row.split(model)[1]  # the date: 20xx-mm-dd


def test_a_stage_without_artifacts_here_is_named_with_what_is_here(cli, root) -> None:
    data, _, _ = root
    result = cli("--data-dir", data, "artifacts", "ls", "--stage", "sfft")
    assert result.exit_code == 0
    assert "no artifact of stage 'sfft'" in result.output and "did you mean sft?" in result.output
    assert "stages here: sft, test_double_trajectories" in result.output
    assert "no artifacts yet" not in cli("--data-dir", data, "artifacts", "ls", "--stage", "rl").output


def test_show_prints_tables_and_json_on_request(cli, root) -> None:
    data, trajectories, model = root
    shown = cli("--data-dir", data, "artifacts", "show", model)
    assert shown.exit_code == 0, shown.output
    for part in ("artifact", "outputs", "params", "passed", "learning_rate", "lineage"):
        assert part in shown.output, part
    assert re.search(rf"input test_double_trajectories +{trajectories}", shown.output)
    assert not shown.output.lstrip().startswith("{")
    raw = cli("--data-dir", data, "artifacts", "show", model, "--json")
    assert json.loads(raw.output)["key"] == model


def test_params_lists_a_stages_fields_with_nested_ones_dotted(cli, tmp_path) -> None:
    result = cli("--data-dir", tmp_path, "params", "rl")
    assert result.exit_code == 0
    for field in ("steps", "checkpoint_every", "sampling.max_tokens", "scheduling.curriculum"):
        assert f"  {field} " in result.output, field
    assert "output_dir" not in result.output  # how a run executes, set by the commands


def test_a_command_run_in_process_leaves_the_progress_logger_as_it_found_it(cli, tmp_path, capsys) -> None:
    """Its lines go to the command's stderr only while it runs: a line reported afterwards reaches no stream that
    closed with the command (which would print a logging error) and still reaches the root's handlers."""
    from inference.progress import RunProgress

    progress = logging.getLogger("gymforge.progress")
    before = (list(progress.handlers), progress.level, progress.propagate)
    assert cli("--data-dir", tmp_path, "params", "rl").exit_code == 0
    assert (list(progress.handlers), progress.level, progress.propagate) == before
    RunProgress("sft", 2, bar=False).update(1, {"loss": 1.0})
    assert "Logging error" not in capsys.readouterr().err


def test_dotted_settings_override_one_nested_field_and_keep_the_profiles_others() -> None:
    from flows.cli.train import parse_settings
    from flows.profiles import stage_params

    overrides = parse_settings(["sampling.max_tokens=8", "steps=2"])
    assert overrides == {"sampling": {"max_tokens": 8}, "steps": 2}
    rl = stage_params("tiny", {"rl": overrides})["rl"]
    assert rl["sampling"] == {"max_tokens": 8, "max_turns": 4} and rl["steps"] == 2  # max_turns: the profile's


def test_a_short_rl_run_checkpoints_at_its_end(cli, tmp_path) -> None:
    from flows.profiles import parse, stage_params

    config = parse("rl", stage_params("tiny", {"rl": {"steps": 2}})["rl"])
    assert config.checkpoint_every == 2  # the profile's 10, clamped to the run
    assert parse("rl", {"steps": 2, "checkpoint_every": 10}) == parse("rl", {"steps": 2, "checkpoint_every": 2})


def test_a_missing_base_directory_is_said_missing(cli, root) -> None:
    data, trajectories, _ = root
    result = cli("--data-dir", data, "train", "sft", "--data", trajectories, "--base", "/models/Qwen3-0.6B")
    # `gymforge` (flows.cli.main) prints a StageError as its one "error:" line
    assert str(result.exception) == "base model directory /models/Qwen3-0.6B does not exist"


def test_a_misspelt_setting_is_one_line_with_a_suggestion(cli, root) -> None:
    data, trajectories, model = root
    result = cli("--data-dir", data, "train", "sft", "--data", trajectories, "--base", model,
                 "--set", "lerning_rate=1e-3")
    assert str(result.exception) == "sft: lerning_rate is not a field (did you mean learning_rate?)"
    assert not result.output.strip()  # nothing else said before it


def test_export_reads_a_published_artifact_without_a_server(cli, tmp_path, monkeypatch) -> None:
    data = tmp_path / "data"
    profile = tmp_path / "profile.yaml"
    profile.write_text("test_double_source: {n: 5}\n")
    from stages_for_tests import source

    execute_stage(open_store(data), Catalog(data), source, {"n": 5}, {}, "default")
    result = cli("--data-dir", data, "export", "--artifact", "test_double_source", "--profile", profile,
                 "--format", "jsonl", "--out", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["i"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == list(range(5))
    assert not (data / "prefect").exists()  # no server was started, so no flow run was made

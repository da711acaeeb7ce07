"""CLI smoke tests through typer's CliRunner: help, catalog commands, clean errors, a run attached to the
session's Prefect server and Dask cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app

# The global options export these for room commands; restore them after each test.
EXPORTED = ("GYMFORGE_DATA", "PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS", "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL",
            "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS")


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch):
    for name in EXPORTED:
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(arg) for arg in args])


def test_help_lists_the_commands(cli) -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for command in ("demo", "run", "backfill", "artifacts", "ui"):
        assert command in result.output


def test_artifacts_on_an_empty_data_root(cli, tmp_path: Path) -> None:
    result = cli("--data-dir", tmp_path, "artifacts", "ls")
    assert result.exit_code == 0 and "no artifacts yet" in result.output
    result = cli("--data-dir", tmp_path, "artifacts", "query", "SELECT count(*) AS n FROM artifacts")
    assert result.exit_code == 0 and "0" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "test_double_source", "--profile", "huge"), "unknown profile 'huge'"),
        (("run", "no_such_stage", "--profile", "{empty}"), "unknown stage 'no_such_stage'"),
        (("artifacts", "show", "feedbeef"), "no artifact with key 'feedbeef'"),
        (("artifacts", "query", "SELECT nope"), "nope"),
    ],
)
def test_user_errors_print_a_message_not_a_traceback(cli, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")
    result = cli("--data-dir", tmp_path, *(arg.format(empty=empty) for arg in args))
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.integration
def test_run_attached_to_a_running_runtime(cli, runtime, tmp_path: Path) -> None:
    profile = tmp_path / "cli.yaml"
    profile.write_text("test_double_source: {n: 2}\n")
    attach = ("--data-dir", runtime.root, "--prefect-api-url", runtime.prefect_api_url,
              "--dask-address", runtime.dask_address)
    result = cli(*attach, "run", "test_double_source", "--profile", profile, "--partition", "cli")
    assert result.exit_code == 0, result.output
    assert "test_double_source" in result.output and "Data Docs" in result.output

    listed = cli(*attach, "artifacts", "ls", "--stage", "test_double_source")
    assert listed.exit_code == 0 and "cli" in listed.output

"""CLI smoke tests through typer's CliRunner: help, catalog commands, clean errors, a run attached to the
session's Prefect server and Dask cluster."""

from __future__ import annotations

import builtins
import errno
import os
import subprocess
import sys
import time
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


def test_the_command_line_loads_no_heavy_library_before_a_command_needs_it() -> None:
    """Every command, and every rollout controller a training run spawns (it imports the command line again as its
    main module), pays for the command line's import: Prefect, Dask, torch, GX and the environment machinery load
    inside the commands that use them."""
    heavy = ("prefect", "distributed", "torch", "transformers", "great_expectations", "duckdb", "envgen.taskgen",
             "envgen.construct")
    script = f"import sys, flows.cli; print([m for m in {heavy!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


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
        (("run", "[/x]", "--profile", "{empty}"), "unknown stage '[/x]'"),  # error text is not parsed as markup
    ],
)
def test_user_errors_print_a_message_not_a_traceback(cli, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")
    result = cli("--data-dir", tmp_path, *(arg.format(empty=empty) for arg in args))
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.slow
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


def _gymforge(*args: str, data: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command in a fresh process, as a user runs it: the data-root checks happen at start-up."""
    env = env or {k: v for k, v in os.environ.items() if k not in EXPORTED} | {"GYMFORGE_DATA": str(data)}
    return subprocess.run([str(Path(sys.executable).parent / "gymforge"), *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


@pytest.mark.parametrize(("args", "message"), [(("nope",), "no experiment 'nope'"),
                                               (("keychain_vs_qa", "--budget", "huge"),
                                                "no budget 'huge'; declared: smoke, default")])
def test_an_unknown_experiment_or_budget_is_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = _gymforge("experiment", "run", *args, data=tmp_path)
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "experiments").exists()  # refused before anything ran


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_data_root_that_is_a_file_is_one_line(tmp_path: Path, where: str) -> None:
    (tmp_path / "f").write_text("x")
    result = _gymforge("artifacts", "ls", data=tmp_path / "f" if where == "a file" else tmp_path / "f" / "d")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    root, what = (tmp_path / "f", "is a file") if where == "a file" else (tmp_path / "f" / "d", "lies under a file")
    expected = f"error: data root {root} {what}, not a directory; set --data-dir or GYMFORGE_DATA to a directory"
    assert result.stderr.strip().splitlines() == [expected]


def test_the_catalog_reads_on_a_read_only_data_root(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli("--data-dir", tmp_path, "artifacts", "ls").exit_code == 0  # creates the catalog
    (tmp_path / "catalog.lock").unlink()
    real_open = builtins.open

    def read_only(file, mode="r", *args, **kwargs):  # permission bits do not stop root: refuse as a RO mount does
        if "r" not in mode or "+" in mode:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only)
    result = cli("--data-dir", tmp_path, "artifacts", "ls")
    assert result.exit_code == 0 and "no artifacts yet" in result.output


def test_fsck_reports_then_repairs(cli, tmp_path: Path) -> None:
    assert cli("--data-dir", tmp_path, "artifacts", "fsck").exit_code == 0
    leftover = tmp_path / "artifacts" / "some_stage" / ".tmp-abc-elsewhere-1-ffff"
    leftover.mkdir(parents=True)
    old = time.time() - 7 * 3600  # another host's writer, silent for longer than any write takes
    os.utime(leftover, (old, old))
    found = cli("--data-dir", tmp_path, "artifacts", "fsck")
    assert found.exit_code == 1 and "leftover" in found.output and "--repair" in found.output
    repaired = cli("--data-dir", tmp_path, "artifacts", "fsck", "--repair")
    assert repaired.exit_code == 0 and not leftover.exists() and "agree" in repaired.output


def test_artifacts_gc_removes_only_writes_older_than_the_bound(cli, tmp_path: Path) -> None:
    stage = tmp_path / "artifacts" / "some_stage"
    old, young = stage / ".tmp-abc-elsewhere-1-ffff", stage / ".tmp-abd-elsewhere-2-ffff"
    for leftover, hours in ((old, 7), (young, 1)):  # other hosts' writers: only their age tells them apart
        leftover.mkdir(parents=True)
        os.utime(leftover, (time.time() - hours * 3600,) * 2)
    refused = cli("--data-dir", tmp_path, "artifacts", "gc", "--older-than", "-1")
    assert refused.exit_code == 2 and "give a number of hours >= 0" in refused.output and old.exists()
    result = cli("--data-dir", tmp_path, "artifacts", "gc", "--older-than", "6")
    assert result.exit_code == 0 and "1 uncommitted write(s) removed" in result.output, result.output
    assert "artifacts/some_stage/.tmp-abc-elsewhere-1-ffff" in result.output
    assert not old.exists() and young.exists()


@pytest.mark.integration
@pytest.mark.slow
def test_a_quarantined_stage_is_said_once_with_what_it_blocked(tmp_path: Path, attached) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("test_double_source: {n: 3, bad_row: true}\n")
    result = _gymforge("run", "test_double_square", "--profile", str(profile), data=tmp_path / "data",
                       env=attached(tmp_path / "data"))
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert "blocked by quarantined test_double_source: test_double_square" in output
    for noise in ("NotReady", "Finished in state", "Traceback"):
        assert noise not in output


def test_artifacts_schema_lists_and_documents_the_records(cli, tmp_path: Path) -> None:
    listed = cli("--data-dir", tmp_path, "artifacts", "schema")
    assert listed.exit_code == 0 and "keychain" in listed.output and "rollout" in listed.output
    shown = cli("--data-dir", tmp_path, "artifacts", "schema", "keychain")
    assert shown.exit_code == 0 and "[target - 2%, target]" in shown.output and "first_key" in shown.output
    unknown = cli("--data-dir", tmp_path, "artifacts", "schema", "nope")
    assert unknown.exit_code == 1 and "unknown record 'nope'" in unknown.output


def test_query_results_print_as_data_not_markup(cli, tmp_path: Path) -> None:
    result = cli("--data-dir", tmp_path, "artifacts", "query", "SELECT '[/x]' AS v")
    assert result.exit_code == 0 and "[/x]" in result.output


# A run as a command runs it, with the command's console settings: the project's warning is said, Prefect's line
# about a stopped run is not (the command says that itself).
RUN_THAT_WARNS = """
import logging
from flows.cli import _quiet_console_logs
_quiet_console_logs()
from prefect import flow
from prefect.runtime import flow_run

@flow(name="says-a-warning")
def says() -> str:
    logging.getLogger("gymforge.test_double").warning("a warning of the test double")
    logging.getLogger("prefect.flow_runs").error("Crash detected! Execution was aborted by an interrupt signal.")
    return flow_run.id

print(says())
"""


@pytest.mark.integration
def test_a_stages_warning_reaches_the_console_and_the_runs_logs_tab(runtime) -> None:
    import httpx

    env = {**os.environ, "PREFECT_API_URL": runtime.prefect_api_url}
    done = subprocess.run([sys.executable, "-c", RUN_THAT_WARNS], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "a warning of the test double" in line]
    assert len(said) == 1 and "WARNING" in said[0] and "Crash detected" not in done.stderr, done.stderr
    run_id = done.stdout.split()[-1]
    deadline = time.monotonic() + 30
    while True:  # the run's process sends its logs in batches
        logs = httpx.post(f"{runtime.prefect_api_url}/logs/filter",
                          json={"logs": {"flow_run_id": {"any_": [run_id]}}}, timeout=30).json()
        messages = [log["message"] for log in logs if log["level"] == 30]
        if messages or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert messages == ["a warning of the test double"], logs

"""`gymforge research`: bad options are one clear line before anything starts; a run writes its report, spec and
trajectory (Researchers on the runtime's Dask cluster) and resumes from its journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

EXPORTED = ("GYMFORGE_DATA", "PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")


def gymforge(*args: str, data: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in EXPORTED} | {"GYMFORGE_DATA": str(data), "COLUMNS": "400"}
    return subprocess.run([str(Path(sys.executable).parent / "gymforge"), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


@pytest.mark.parametrize(("args", "message"), [
    (("run", "Zorvex Labs", "--teacher", "gpt4"), "use reference, hf:DIR, openai:URL#MODEL or vllm:DIR"),
    (("run", "Zorvex Labs", "--teacher", "openai:localhost:8000#m"), "openai:http(s)://HOST:PORT/v1#MODEL"),
    (("run", "   "), "the query is empty"),
    (("run", "Zorvex Labs", "--writers", "0"), "--writers: Input should be greater than or equal to 1"),
    (("tasks", "--routes", "essay"), "brief, article"),
    (("tasks", "--routes", ""), "no route was given"),
    (("qa", "--engine", "tiny"), "use reference"),
    (("run", "Zorvex Labs", "--judge", "reference"), "the judge must be an engine"),
])
def test_bad_options_are_one_line_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         args: tuple[str, ...], message: str) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    for name in EXPORTED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "400")
    result = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "research", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "prefect").exists()  # no server was started


@pytest.mark.integration
@pytest.mark.slow
def test_a_research_run_writes_its_report_and_resumes(tmp_path: Path) -> None:
    from tasks.world import world

    params = {"n_entities": 120, "n_questions": 0}
    profile = tmp_path / "world.yaml"
    profile.write_text(f"world: {json.dumps(params)}\n")
    entities = world.run({}, world.parse_params(params), "default")["entities"]
    name = entities.filter(pl.col("type") == "organization")["name"][0]
    out, query = tmp_path / "out", f"Write a report on {name}."
    result = gymforge("research", "run", query, "--profile", str(profile), "--out", str(out), data=tmp_path,
                      timeout=400)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("complete: ") and "supported by their source" in result.stdout  # results only
    assert "research call" in result.stderr  # the progress lines go to stderr
    assert (out / "report.md").read_text().startswith(f"# Research report: {name}")
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["event"] == "run" and journal[-1]["event"] == "end"
    assert json.loads((out / "spec.json").read_text())["sections"]
    again = gymforge("research", "run", query, "--profile", str(profile), "--out", str(out), data=tmp_path,
                     timeout=400)
    assert again.returncode == 0 and (out / "journal.jsonl").read_text().count('"event": "end"') == 1

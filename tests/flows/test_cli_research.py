"""`gymforge research`: bad options are one clear line before anything starts; a run writes its report, spec and
trajectory (Researchers on the runtime's Dask cluster) and resumes from its journal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

EXPORTED = ("GYMFORGE_DATA", "PREFECT_API_URL", "GYMFORGE_DASK_ADDRESS")


def gymforge(*args: str, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "gymforge"), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


@pytest.mark.parametrize(("args", "message"), [
    (("run", "Zorvex Labs", "--teacher", "gpt4"), "expected hf:DIR, openai:URL#MODEL or vllm:DIR, or 'reference'"),
    (("run", "Zorvex Labs", "--teacher", "openai:localhost:8000#m"), "openai:http(s)://HOST:PORT/v1#MODEL"),
    (("run", "   "), "the query is empty"),
    (("run", "Zorvex Labs", "--writers", "0"), "--writers: Input should be greater than or equal to 1"),
    (("tasks", "--constructions", "essay"), "brief, article"),
    (("tasks", "--constructions", ""), "no construction was given"),
    (("qa", "--engine", "tiny"), "or 'reference'"),
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
def test_a_research_run_writes_its_report_and_resumes(tmp_path: Path, attached) -> None:
    from tasks.longctx.world import world

    params = {"n_entities": 120, "n_questions": 0}
    profile = tmp_path / "world.yaml"
    profile.write_text(f"world: {json.dumps(params)}\n")
    entities = world.run({}, world.parse_params(params), "default")["entities"]
    name = entities.filter(pl.col("type") == "organization")["name"][0]
    out, query = tmp_path / "out", f"Write a report on {name}."
    env = attached(tmp_path) | {"COLUMNS": "400"}
    result = gymforge("research", "run", query, "--profile", str(profile), "--out", str(out), env=env, timeout=400)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("complete: ") and "supported by their source" in result.stdout  # results only
    assert "research call" in result.stderr  # the progress lines go to stderr
    assert (out / "report.md").read_text().startswith(f"# Research report: {name}")
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["event"] == "run" and journal[-1]["event"] == "end"
    assert json.loads((out / "spec.json").read_text())["sections"]
    again = gymforge("research", "run", query, "--profile", str(profile), "--out", str(out), env=env, timeout=400)
    assert again.returncode == 0 and (out / "journal.jsonl").read_text().count('"event": "end"') == 1


def _check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> object:
    from typer.testing import CliRunner

    from flows.cli import app

    for name in EXPORTED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "400")
    return CliRunner().invoke(app, ["--data-dir", str(tmp_path), "research", "check", *args])


def test_research_check_lists_planted_false_citations_and_exits_nonzero(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from research_fixtures import index_dir, kg

    g = kg()
    org = g.of_type("organization")[0]
    name, a = g.name(org), g.attributes(org)
    founder = next(v for r, v in g.out_edges(org) if r == "founded_by")
    true = [f"{name} employs {a['employees']:,} people [cite:{org}].",
            f"{name} was founded by {g.name(founder)} [cite:{org}]."]
    false = [f"{name} employs {a['budget']:,} people and its annual budget is ${a['employees']:,} [cite:{org}].",
             f"{name} founded {g.name(founder)} [cite:{org}].",
             f"{name} was not founded by {g.name(founder)} [cite:{org}].",
             f"{name} has a long history [cite:E999999]."]
    report = tmp_path / "report.md"
    report.write_text("# Report\n\n" + " ".join(true + false) + "\n")
    result = _check(tmp_path, monkeypatch, str(report), "--index", index_dir())
    assert result.exit_code == 1, result.output
    assert result.output.count("unsupported") == 3 and "the index has no such document" in result.output
    assert "6 citations: 2 supported, 4 not" in result.output
    assert "the source states the reverse" in result.output and "as budget, not employees" in result.output
    as_json = _check(tmp_path, monkeypatch, str(report), "--index", index_dir(), "--json")
    rows = json.loads(as_json.output)["citations"]
    assert [r["verdict"] for r in rows] == ["supported"] * 2 + ["unsupported"] * 3 + ["missing"]
    report.write_text(" ".join(true))
    assert _check(tmp_path, monkeypatch, str(report), "--index", index_dir()).exit_code == 0


def test_research_check_holds_a_citation_after_the_period_to_its_sentence(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from research_fixtures import index_dir, kg

    g = kg()
    org = g.of_type("organization")[0]
    name, employees = g.name(org), g.attributes(org)["employees"]
    false = f"{name} has {employees + 5000:,} employees"
    report = tmp_path / "report.md"
    for text in (f"{false}. [cite:{org}]", f"{false} [cite:{org}]."):
        report.write_text(f"# Report\n\n{text}\n")
        result = _check(tmp_path, monkeypatch, str(report), "--index", index_dir(), "--json")
        assert result.exit_code == 1, result.output
        out = json.loads(result.output)
        [row] = out["citations"]
        assert row["sentence"].startswith(false) and row["verdict"] == "unsupported", row
        assert out["summary"]["uncited_sentences"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (("nowhere.md",), "nowhere.md: no such file"),
    (("REPORT", "--index", "0123abcd"), "neither an index directory nor a published search_index key"),
    (("REPORT",), "the catalog holds none published search indexes"),
    (("REPORT", "--judge", "reference"), "the judge must be an engine"),
])
def test_research_check_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           args: tuple[str, ...], message: str) -> None:
    report = tmp_path / "report.md"
    report.write_text("A sentence [cite:E1].\n")
    result = _check(tmp_path, monkeypatch, *(str(report) if a == "REPORT" else a for a in args))
    assert result.exit_code == 2 and message in " ".join(result.output.split()) and "Traceback" not in result.output

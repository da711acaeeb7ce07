"""`gymforge envgen`: list-domains, replay (golden and mutated) on bundles, generate through the store (slow)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envgen.bundle import read_bundle, write_bundle
from envgen.compiler import compiled
from envgen.construct import ConstructionSettings, build_environment
from envgen.mutations import MUTATIONS
from envgen.taskgen import TaskSettings, environment_record, make_task
from flows.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundles")
    for name, seed in (("airline", 1), ("telecom", 2)):
        d = compiled(name)
        built = build_environment(d, seed, ConstructionSettings())
        env = environment_record(d, built, f"{name}-{seed}", seed)
        task, reason = make_task(d, env, built, random.Random(seed), TaskSettings())
        assert task is not None, reason
        write_bundle(root, env, [task])
    return root


def test_list_domains_json() -> None:
    result = runner.invoke(app, ["envgen", "list-domains", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {"airline", "retail", "telecom"} <= {r["domain"] for r in rows}
    assert all(set(r) >= {"domain", "tools", "edges", "density"} and r["tools"] >= 60 for r in rows)


def test_bundle_round_trip(bundles: Path) -> None:
    env, tasks = read_bundle(bundles / "airline-1")
    assert env["db"] == (bundles / "airline-1" / "db.sqlite").read_bytes()
    assert json.loads(tasks[0]["golden_actions"])


def test_replay_golden(bundles: Path) -> None:
    result = runner.invoke(app, ["envgen", "replay", str(bundles), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 2 and all(r["reward"] == 1.0 for r in rows)


@pytest.mark.parametrize("kind", MUTATIONS)
def test_replay_mutated_scores_zero(bundles: Path, kind: str) -> None:
    result = runner.invoke(app, ["envgen", "replay", str(bundles / "telecom-2"), "--mutate", kind, "--json"])
    assert result.exit_code == 0, result.output
    assert [r["reward"] for r in json.loads(result.output)] == [0.0]


def flat(output: str) -> str:
    """Rich wraps error text inside a box; join it back into one line."""
    return " ".join(output.replace("│", " ").split())


def test_bad_input_is_named(tmp_path: Path, bundles: Path) -> None:
    result = runner.invoke(app, ["envgen", "replay", str(tmp_path)])
    assert result.exit_code != 0 and "no environment bundle" in flat(result.output)
    result = runner.invoke(app, ["envgen", "replay", str(bundles), "--mutate", "swap"])
    assert result.exit_code != 0 and "drop-write" in flat(result.output)
    result = runner.invoke(app, ["envgen", "list-domains", "--domains", "atlantis"])
    assert result.exit_code != 0 and "unknown domain" in flat(result.output)


@pytest.mark.slow
@pytest.mark.integration
def test_generate_through_the_store_writes_identical_bundles(tmp_path: Path) -> None:
    """Both command forms run the stages through the store; the second is a cache hit with identical bytes."""
    data = tmp_path / "data"
    first = runner.invoke(app, ["envgen", "generate", "--domains", "retail", "--envs-per-domain", "1",
                                "--out", str(tmp_path / "a"), "--data-dir", str(data), "--json"])
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, ["envgen", "--domains", "retail", "--envs-per-domain", "1",
                                 "--out", str(tmp_path / "b"), "--data-dir", str(data), "--json"])
    assert second.exit_code == 0, second.output
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)


def test_check_specs(tmp_path: Path) -> None:
    from envgen.domain_spec import domain_paths

    result = runner.invoke(app, ["envgen", "check", str(domain_paths()["airline"]), "--envs", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0] == {"domain": "airline", "tools": 79, "executability": 1.0, "kept": 1,
                                            "problems": 0}
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nnow: 1\n")
    result = runner.invoke(app, ["envgen", "check", str(bad)])
    assert result.exit_code == 1 and "ISO date-time" in flat(result.output)


def test_check_names_a_file_that_is_not_utf8_and_counts_every_listed_problem(tmp_path: Path) -> None:
    import copy

    import yaml
    from spec_fixtures import MINIMAL

    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: latin\ndescription: caf\xe9\n".encode("latin-1"))
    result = runner.invoke(app, ["envgen", "check", str(latin), "--json"])
    assert result.exit_code == 1, result.output
    assert f"{latin}: 1 problem(s) in domain spec" in result.stderr and "line 2: not UTF-8 text" in result.stderr
    spec = copy.deepcopy(MINIMAL)
    spec["name"] = "dup"
    spec["actions"].append({**copy.deepcopy(spec["actions"][0]),
                            "params": [{"name": "box_id", "type": "string", "description": "d"}]})
    dup = tmp_path / "dup.yaml"
    dup.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = runner.invoke(app, ["envgen", "check", str(dup), "--json"])
    listed = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert result.exit_code == 1 and len(listed) == 2, result.output
    assert "duplicate action 'shut_box'" in listed[0] and "duplicate parameter names" in listed[1]
    assert json.loads(result.stdout)[0]["problems"] == len(listed)

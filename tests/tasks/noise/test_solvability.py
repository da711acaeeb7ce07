"""Noisy twins in real environments: the robust reference agent solves every one, the naive one degrades with the
level, broken noise and infrastructure failures are told apart, the stages meet their contracts deterministically."""

from __future__ import annotations

import json
import random

import polars as pl
import pytest

from data_contracts.gate import validate
from data_contracts.stage import REJECTED, FrameArtifact
from envgen.compiler import compiled
from envgen.construct import ConstructionSettings, build_environment
from envgen.noise.curriculum import noise_level
from envgen.noise.environment import NoisyEnvironment, scored_for_agent
from envgen.noise.instruction import INSTRUCTION_TRANSFORMS
from envgen.noise.records import NoiseRecord, Transform
from envgen.noise.tools import TOOL_FAULTS
from envgen.taskgen import TaskSettings, environment_record, make_task
from envgen.tools import ToolResult
from tasks.noise.noisy_eval import NoiseEvalParams, noisy_eval
from tasks.noise.noisy_tasks import noisy_tasks
from tasks.noise.plot import plot_noise_success
from tasks.noise.solvability import make_noisy_task, noisy_twins, summary_frame, survey, verify, writes_of
from tasks.noise.twins import NoiseParams

SEEDS = range(8)


@pytest.fixture(scope="module")
def world() -> tuple[list[dict], list[dict]]:
    """Environments and verified tasks from the real construction pipeline (airline domain)."""
    domain = compiled("airline")
    envs, tasks = [], []
    for seed in SEEDS:
        built = build_environment(domain, seed, ConstructionSettings())
        env = environment_record(domain, built, f"env{seed}", seed)
        task, _ = make_task(domain, env, built, random.Random(seed), TaskSettings())
        if task is not None:
            envs.append(env)
            tasks.append(task)
    assert len(tasks) >= 6
    return envs, tasks


@pytest.fixture(scope="module")
def artifact(world) -> FrameArtifact:
    envs, tasks = world
    return FrameArtifact({"environments": pl.DataFrame(envs), "tasks": pl.DataFrame(tasks)})


@pytest.fixture(scope="module")
def staged(artifact) -> dict[str, pl.DataFrame]:
    return noisy_tasks.run({"environments": artifact}, NoiseParams(seed=3), "p0")


def test_robust_reference_agent_solves_every_noisy_task(staged) -> None:
    tasks, rejected = staged["tasks"], staged[REJECTED]
    assert rejected.height == 0, rejected.select("task_id", "reason").to_dicts()
    assert tasks["robust_success"].all()
    assert sorted(set(tasks["noise_level"])) == [1, 2, 3, 4]


def test_every_kind_is_exercised_and_recorded(staged) -> None:
    seen = {k for ks in staged["tasks"]["transforms"] for k in ks}
    assert seen == set(INSTRUCTION_TRANSFORMS) | set(TOOL_FAULTS)
    for row in staged["tasks"].iter_rows(named=True):
        record = NoiseRecord.from_json(row["noise"])
        assert record is not None and list(record.kinds) == list(row["transforms"])
        assert record.clean_task_id == row["clean_task_id"] and record.level == row["noise_level"]


def test_naive_success_falls_as_the_level_rises(staged) -> None:
    summary = summary_frame(staged["tasks"], staged[REJECTED]).filter(pl.col("transform") == "all").sort("level")
    naive = summary["naive_success"].to_list()
    # level 1 is one surface transform and one tool fault that may be latency: on eight tasks it may bite none
    assert naive[0] >= naive[1] >= naive[-1] and naive[0] > naive[2], naive
    assert sum(naive[3:]) / 2 < sum(naive[:2]) / 2
    assert summary["robust_success"].to_list() == [1.0] * 5


def test_outputs_pass_their_contracts(staged) -> None:
    for name, contract in noisy_tasks.outputs.items():
        report = validate("noisy_tasks", name, staged[name], contract, "p0")
        assert report.passed, report


def test_same_seed_same_bytes_other_seed_other_noise(artifact, staged) -> None:
    again = noisy_tasks.run({"environments": artifact}, NoiseParams(seed=3), "p0")
    assert again["tasks"].equals(staged["tasks"])
    other = noisy_tasks.run({"environments": artifact}, NoiseParams(seed=4, levels=(4,)), "p0")
    mine = staged["tasks"].filter(pl.col("noise_level") == 4)
    assert other["tasks"]["noise"].to_list() != mine["noise"].to_list()


def test_eval_twins_default_to_the_hardest_level(artifact) -> None:
    out = noisy_eval.run({"eval_random_envs": artifact}, NoiseEvalParams(max_tasks=2), "p0")
    assert out["tasks"]["noise_level"].to_list() == [4, 4]
    assert out["tasks"]["task_id"].to_list() == [f"{t}~noise4" for t in out["tasks"]["clean_task_id"]]


def test_noise_that_breaks_solvability_is_rejected_with_its_reason(world) -> None:
    envs, tasks = world
    env = NoisyEnvironment(envs[0])
    clean = survey(env, tasks[0])
    noisy = make_noisy_task(tasks[0], clean.outputs, noise_level(1), seed=0, writes=writes_of(env))
    first = json.loads(tasks[0]["golden_actions"])[0]
    # More consecutive failures than the robust agent retries: the task can no longer be solved.
    broken = Transform(family="tool", kind="transient_failure", tool=first["name"], arguments=first["arguments"],
                       changed={"failures": 50, "error": "timeout"}, recovery="retry", hint="retry")
    record = NoiseRecord.from_json(noisy["noise"])
    noisy["noise"] = record.model_copy(update={"transforms": (*record.transforms, broken)}).to_json()
    verdict = verify(env, noisy, clean)
    assert not verdict.kept and verdict.reason.startswith("unsolvable under noise")


def test_infrastructure_failure_is_never_the_agents(world, monkeypatch) -> None:
    envs, tasks = world
    env = NoisyEnvironment(envs[0])
    clean = survey(env, tasks[0])
    noisy = make_noisy_task(tasks[0], clean.outputs, noise_level(1), seed=0, writes=writes_of(env))

    def broken_tool(self, name, arguments):  # a defect of the tool implementation, as the runtime reports it
        return ToolResult({"error": f"internal error in {name}: OperationalError"}, internal_error=True)

    monkeypatch.setattr("envgen.environment.Environment.call_tool", broken_tool)
    verdict = verify(env, noisy, clean)
    assert verdict.robust.failure == "tool" and not scored_for_agent(dict(verdict.robust.info))
    assert verdict.reason.startswith("infrastructure")
    assert verdict.robust.info["noise"]["infrastructure_errors"] >= 1


def test_clean_task_the_robust_agent_cannot_solve_is_rejected(world) -> None:
    envs, tasks = world
    env = NoisyEnvironment(envs[0])
    task = {**tasks[0], "rubric": json.dumps({**json.loads(tasks[0]["rubric"]), "expected_diff": {"x": 1}})}
    _, verdicts = noisy_twins(env, task, [noise_level(1)], [0])
    assert verdicts[0].reason.startswith("clean task not solved")


@pytest.mark.parametrize(("params", "message"), [
    ({"levels": [0]}, "outside"), ({"levels": [5]}, "outside"), ({"levels": []}, "non-empty"),
    ({"max_tasks": 0}, "max_tasks"), ({"max_level": 2, "levels": [3]}, "outside"),
])
def test_bad_params_say_what_to_set(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        noisy_tasks.parse_params(params)


def test_plot_is_written(staged, tmp_path) -> None:
    path = plot_noise_success(summary_frame(staged["tasks"], staged[REJECTED]), tmp_path / "noise.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="lacks columns"):
        plot_noise_success(pl.DataFrame({"level": [1]}), tmp_path / "bad.png")


def write_bundles(root, envs: list[dict], tasks: list[dict]) -> None:
    """Environment bundles as `gymforge envgen --out` writes them."""
    from envgen.bundle import write_bundle

    for env in envs:
        write_bundle(root, env, [t for t in tasks if t["env_id"] == env["env_id"]])


def test_cli_writes_noisy_bundles_and_prints_the_summary(world, tmp_path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    envs, tasks = world
    write_bundles(tmp_path / "envs", envs[:3], tasks)
    out = tmp_path / "noisy"
    args = ["noise", "--envs", str(tmp_path / "envs"), "--level", "2", "--out", str(out), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert {(r["transform"], r["level"]) for r in summary} >= {("all", 0), ("all", 2)}
    assert all(set(r) == {"transform", "level", "robust_success", "naive_success", "tasks"} for r in summary)
    from envgen.bundle import read_bundle

    _, noisy = read_bundle(out / envs[0]["env_id"])
    assert noisy and all(t["noise_level"] == 2 and t["robust_success"] for t in noisy)
    assert all(NoiseRecord.from_json(t["noise"]).clean_task_id == t["clean_task_id"] for t in noisy)
    assert (out / "noise_success.png").exists() and (out / "rejected.jsonl").exists()
    # The output is itself a bundle directory: the noise command reads it again.
    again = CliRunner().invoke(app, ["noise", "--envs", str(out), "--level", "1", "--out", str(tmp_path / "n2")])
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize(("setup", "message"), [
    (lambda d: None, "no environment bundle"),
    (lambda d: (d / "e").mkdir() or (d / "e" / "env.json").write_text("{}"), "lacks"),
    (lambda d: [(d / "e").mkdir(), *((d / "e" / f).write_text("{") for f in ("env.json", "tools.json", "graph.json",
                                                                         "tasks.jsonl", "db.sqlite"))], "invalid JSON"),
])
def test_cli_names_the_bad_input_and_writes_nothing(tmp_path, setup, message: str) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    (tmp_path / "envs").mkdir()
    setup(tmp_path / "envs")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["noise", "--envs", str(tmp_path / "envs"), "--level", "1", "--out", str(out)],
                                env={"COLUMNS": "400"})
    assert result.exit_code != 0 and message in result.output
    assert not out.exists()


@pytest.mark.slow
def test_stages_publish_through_the_store_from_the_environment_stages(tmp_path) -> None:
    from flows.registry import discover

    discover()  # registers the upstream stages
    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from data_contracts.runner import run_serially

    # Two shipped domains keep the upstream stages small (and this test about the noise stages).
    params = {"domain_graphs": {"domains": "airline,retail"},
              "environments": {"envs_per_domain": 1, "heldout": []},
              "eval_random_envs": {"runs": 1, "tasks_per_run": 4, "min_domains": 2, "heldout": []},
              "noisy_tasks": {"levels": [1, 4]}, "noisy_eval": {}}
    runs = run_serially(open_store(tmp_path), Catalog(tmp_path), ["noisy_tasks", "noisy_eval"], params, "p0",
                       progress=False)
    for name in ("noisy_tasks", "noisy_eval"):
        assert all(runs[name].contract.values()), runs[name]
        assert runs[name].outputs["tasks"] > 0


HASH_SCRIPT = """
import hashlib, random
import polars as pl
from data_contracts.stage import FrameArtifact
from envgen.compiler import compiled
from envgen.construct import ConstructionSettings, build_environment
from envgen.taskgen import TaskSettings, environment_record, make_task
from tasks.noise.twins import NoiseParams
from tasks.noise.noisy_tasks import noisy_tasks
domain, envs, tasks = compiled("airline"), [], []
for seed in range(3):
    built = build_environment(domain, seed, ConstructionSettings())
    env = environment_record(domain, built, f"env{seed}", seed)
    task, _ = make_task(domain, env, built, random.Random(seed), TaskSettings())
    if task is not None:
        envs.append(env)
        tasks.append(task)
art = FrameArtifact({"environments": pl.DataFrame(envs), "tasks": pl.DataFrame(tasks)})
out = noisy_tasks.run({"environments": art}, NoiseParams(), "p0")
print(hashlib.sha256((out["tasks"].write_ndjson() + out["rejected"].write_ndjson()).encode()).hexdigest())
"""


@pytest.mark.slow
def test_noisy_tasks_do_not_depend_on_the_hash_seed() -> None:
    import os
    import subprocess
    import sys

    digests = {subprocess.run([sys.executable, "-c", HASH_SCRIPT], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2")}
    assert len(digests) == 1

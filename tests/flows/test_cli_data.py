"""`gymforge export` and `gymforge keychain` argument handling; the exported file loads in `datasets` for GRPO."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import polars as pl
import pytest
import typer
from paths import QA_FIXTURES
from typer.testing import CliRunner

from flows.cli import app
from flows.cli import data as cli_data

FIXTURES = QA_FIXTURES
ROWS = [
    {"id": f"kc-{i}", "category": "keychain", "curriculum_stage": stage,
     "prompt": json.dumps([{"role": "user", "content": f"Passage {i}. Starting from key ABC, ... \\boxed{{}}"}]),
     "answer": "Northwick", "aliases": ["North Wick"], "reward_fn": "two_way", "distractor_chains": "[]"}
    for i, stage in enumerate(["stage1", "stage1", "stage2"])
]


@pytest.fixture
def mix_file(tmp_path):
    path = tmp_path / "mix.parquet"
    pl.DataFrame(ROWS).write_parquet(path)
    return path


def test_export_trl_parquet_loads_as_conversational_prompts(mix_file, tmp_path):
    from datasets import Dataset

    out = tmp_path / "train.parquet"
    result = CliRunner().invoke(app, ["export", "--artifact", str(mix_file), "--format", "trl", "--out", str(out),
                                      "--curriculum-stage", "stage1"])
    assert result.exit_code == 0, result.output
    data = Dataset.from_parquet(str(out))
    assert len(data) == 2
    assert data[0]["prompt"] == json.loads(ROWS[0]["prompt"])
    assert data[0]["answer"] == "Northwick" and data[0]["aliases"] == ["North Wick"]


def test_export_jsonl_decodes_nested_columns(mix_file, tmp_path):
    out = tmp_path / "mix.jsonl"
    result = CliRunner().invoke(app, ["export", "--artifact", str(mix_file), "--format", "jsonl", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == [r["id"] for r in ROWS]
    assert records[0]["prompt"][0]["role"] == "user" and records[0]["distractor_chains"] == []


@cache
def rl_ready() -> dict[str, pl.DataFrame]:
    """The main output of every artifact GRPO trains on: the rl_mix inputs, the mix itself, and QA seeds."""
    from longctx_fixtures import qa_filtered
    from mix_inputs import mix_inputs

    from data_contracts.stage import get_stage
    from tasks.longctx.qa_seeds import load_seed_file

    inputs = mix_inputs()
    mix = get_stage("rl_mix")
    return {
        "math_seeds": inputs["math_seeds"].read("problems"),
        "needles": inputs["needles"].read("needles"),
        "keychain": inputs["keychain"].read("keychain"),
        "rl_mix": mix.run(inputs, mix.parse_params({}), "p0")["mix"],
        "qa_filtered": qa_filtered().read("seeds"),
        "qa_seeds": load_seed_file("hotpotqa", FIXTURES / "hotpotqa.json")[0],
    }


@pytest.mark.parametrize("stage", ["math_seeds", "needles", "keychain", "rl_mix", "qa_filtered", "qa_seeds"])
def test_every_rl_ready_artifact_exports_for_trl(stage: str, tmp_path) -> None:
    """Artifacts without a prompt column get the prompt rl_mix gives the same item."""
    from datasets import load_dataset

    from tasks.longctx import rl_mix

    frame = rl_ready()[stage]
    artifact, out = tmp_path / f"{stage}.parquet", tmp_path / "train.parquet"
    frame.write_parquet(artifact)
    result = CliRunner().invoke(app, ["export", "--artifact", str(artifact), "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(data) == frame.height > 0 and data["answer"] == frame["answer"].to_list()
    if "prompt" in frame.columns:
        expected = [json.loads(p) for p in frame["prompt"]]
    elif "docs" in frame.columns:
        expected = [json.loads(p) for p in rl_mix.qa_rows(frame, pl.Series([], dtype=pl.String))["prompt"]]
    else:
        expected = [json.loads(p) for p in rl_mix.math_rows(frame)["prompt"]]
    assert data["prompt"] == expected
    assert all(m[-1]["role"] == "user" and "\\boxed{}" in m[-1]["content"] for m in data["prompt"])


@pytest.mark.parametrize("args", [["--format", "csv", "--out", "x.jsonl"], ["--format", "trl", "--out", "x.txt"]])
def test_export_refuses_bad_formats(mix_file, tmp_path, args):
    args = [a if a not in ("x.jsonl", "x.txt") else str(tmp_path / a) for a in args]
    result = CliRunner().invoke(app, ["export", "--artifact", str(mix_file), *args])
    assert result.exit_code != 0 and not any(tmp_path.glob("x.*"))


def test_seed_sources(tmp_path):
    data = tmp_path / "hotpot.json"
    data.write_bytes((FIXTURES / "hotpotqa.json").read_bytes())
    assert cli_data.seed_source("world") == "world"
    assert cli_data.seed_source(f"hotpotqa:{data}") == f"hotpotqa:{data.resolve()}"
    assert cli_data.seed_source(f"musique:{FIXTURES / 'musique.jsonl'}@eval") == \
        f"musique:{(FIXTURES / 'musique.jsonl').resolve()}@eval"
    for bad in ("wiki:x", "world:x"):
        with pytest.raises(typer.BadParameter):
            cli_data.seed_source(bad)


def gymforge(cwd: Path, *args: str) -> tuple[int, str]:
    """Run the installed command as a user does; (exit code, stdout and stderr)."""
    command = Path(sys.executable).with_name("gymforge")
    env = {**os.environ, "GYMFORGE_DATA": str(cwd / "data"), "COLUMNS": "80"}
    done = subprocess.run([str(command), *args], check=False, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stdout + done.stderr


SEED_FILES = {  # name -> (content, the problem the error names)
    "empty.jsonl": ("\n\n", "no records"),
    "corrupt.json": ('[{"_id": 1,', "line 1: invalid JSON"),
    "[target - 2%, target].json": ("", "empty file"),  # rich markup would eat the bracketed part of the name
    "unanswerable.jsonl": ('{"id": "1", "question": "q", "paragraphs": [], "answerable": false}\n',
                           "all 1 records were rejected"),
}


@pytest.mark.parametrize("case", ["--n -5", "missing", "profile", *SEED_FILES])
def test_keychain_user_errors_are_one_line_before_anything_starts(case: str, tmp_path: Path) -> None:
    """A bad option, profile or seed file: one `error:` line naming it, exit code 1, no traceback, and neither a
    Prefect server nor a Dask cluster started (nothing under the data root)."""
    args = ["keychain", "--out", "kc.parquet"]
    if case == "--n -5":
        args += ["--n", "-5"]
        expected = "error: --n -5: Input should be greater than or equal to 0"
    elif case == "missing":
        args += ["--seeds", "musique:/nonexistent.jsonl"]
        expected = "error: /nonexistent.jsonl: no such musique file"
    elif case == "profile":
        (tmp_path / "bad.yaml").write_text("keychain: {max_draws_per_item: 1}\n")  # no option overrides it
        args += ["--profile", "bad.yaml"]
        expected = "error: keychain: max_draws_per_item=1: Input should be greater than or equal to 10"
    else:
        text, problem = SEED_FILES[case]
        (tmp_path / case).write_text(text)
        kind = "musique" if case.endswith(".jsonl") else "hotpotqa"
        args += ["--seeds", f"{kind}:{case}"]
        expected = f"error: {tmp_path / case}"
    code, output = gymforge(tmp_path, *args)
    assert code == 1, output
    assert "Traceback" not in output and output.startswith("error: ") and expected in output
    if case in SEED_FILES:
        assert output.count("\n") == 1 and problem in output
    if case == "profile":
        assert output.count("\n") == 1  # the field, its value and the bound; no list of every field
    assert not (tmp_path / "data" / "prefect").exists() and not (tmp_path / "data" / "dask").exists()
    assert not (tmp_path / "kc.parquet").exists()


@pytest.mark.integration
@pytest.mark.slow
def test_keychain_through_the_store(runtime, tmp_path):
    """world -> qa_seeds -> tiny_policy -> qa_filtered -> keychain on the tiny profile, published and gated."""
    overrides = {  # a few optimizer steps and a window keeping every pass count: this tests the plumbing, not the policy
        "tiny_policy": {"steps": 2, "warmup_steps": 1, "max_seeds": 32},
        "qa_filtered": {"k": 2, "max_tokens": 4, "window": [0, 2]},
        "keychain": {"n": 4, "n_regular": 2, "target_tokens": 1024},
    }
    from data_contracts.files import write_frame
    from flows.dag import materialize

    artifact = materialize(["keychain"], profile="tiny", overrides=overrides, runtime=runtime)["keychain"]
    frame = artifact.read("keychain")
    assert frame.height + artifact.read("rejected").filter(pl.col("kind") == "keychain").height == 4
    assert all(1004 <= t <= 1024 for t in frame["tokens"])
    assert write_frame(frame, tmp_path / "kc.parquet").is_file()


def test_keychain_command_passes_its_settings_and_writes_the_file(monkeypatch, tmp_path):
    from longctx_fixtures import qa_filtered, tokenizer_artifact

    from data_contracts.stage import FrameArtifact
    from tasks.longctx import keychain

    seen = {}

    def through_store_double(targets, *, profile, overrides, data_dir):  # test double for the store round trip
        seen.update(overrides=overrides, profile=profile)
        params = keychain.KeyChainParams(**overrides["keychain"])
        frames = keychain.keychain.run({"qa_filtered": qa_filtered(), "tokenizer": tokenizer_artifact()}, params, "p0")
        return {"keychain": FrameArtifact(frames, key="double")}

    monkeypatch.setattr("flows.dag.materialize", through_store_double)
    out = tmp_path / "kc.parquet"
    result = CliRunner().invoke(app, ["keychain", "--seeds", "world", "--n", "3", "--target-tokens", "1536",
                                      "--key-format", "hex8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert seen["overrides"]["qa_seeds"] == {"source": "world"}
    assert seen["overrides"]["keychain"]["key_format"] == "hex8"
    frame = pl.read_parquet(out)
    assert frame.height == 3 and set(frame["key_format"]) == {"hex8"}
    assert all(1506 <= t <= 1536 for t in frame["tokens"])


def _trajectories() -> pl.DataFrame:
    call = {"id": "c0", "type": "function", "function": {"name": "get_user", "arguments": '{"user_id": "U1"}'}}
    bad = {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": '{"user_id": "U9"}'}}
    tools = [{"type": "function", "function": {"name": "get_user", "description": "d", "parameters": {
        "type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}}]
    rows = [
        [{"role": "system", "content": "s"}, {"role": "user", "content": "I am U1."},
         {"role": "assistant", "content": "Looking up U9.", "tool_calls": [bad]},
         {"role": "tool", "tool_call_id": "c1", "content": '{"error": "no such user"}'},
         {"role": "assistant", "content": "Looking up U1.", "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "c0", "content": '{"user_id": "U1"}'},
         {"role": "assistant", "content": "Found you."}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    ]
    return pl.DataFrame({"id": ["t0", "t1"], "source": ["midtrain_env", "midtrain_text"],
                         "messages": [json.dumps(m) for m in rows], "tools": [json.dumps(tools)] * 2,
                         "train": [[False, False, False, False, True, False, True], [False, True]]})


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_export_sft_loads_with_datasets_and_keeps_the_turn_masks(suffix: str, tmp_path) -> None:
    from datasets import load_dataset

    frame = _trajectories()
    artifact, out = tmp_path / "trajectories.parquet", tmp_path / f"sft{suffix}"
    frame.write_parquet(artifact)
    result = CliRunner().invoke(app, ["export", "--artifact", str(artifact), "--format", "sft", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = load_dataset(suffix.lstrip(".").replace("jsonl", "json"), data_files=str(out), split="train",
                        cache_dir=str(tmp_path / "hf"))
    assert data["id"] == ["t0", "t1"] and json.loads(data[0]["tools"])[0]["function"]["name"] == "get_user"
    for example, row in zip(data, frame.iter_rows(named=True), strict=True):
        source = json.loads(row["messages"])
        assert [m["role"] for m in example["messages"]] == [m["role"] for m in source]
        assert [m["train"] for m in example["messages"]] == row["train"]
        calls = [[c["function"]["arguments"] for c in m["tool_calls"] or []] for m in example["messages"]]
        assert calls == [[c["function"]["arguments"] for c in m.get("tool_calls") or []] for m in source]


def test_export_sft_refuses_an_artifact_without_trajectories(mix_file, tmp_path) -> None:
    result = CliRunner().invoke(app, ["export", "--artifact", str(mix_file), "--format", "sft",
                                      "--out", str(tmp_path / "x.parquet")])
    # a StageError: `gymforge` prints it as one "error:" line (tests/flows/test_cli_output.py)
    assert result.exit_code != 0 and "trajectory artifact" in str(result.exception)
    assert not (tmp_path / "x.parquet").exists()


@pytest.fixture
def environment_artifact(tmp_path) -> Path:
    """An artifact directory of two environments and their tasks (as the environments stage writes it)."""
    from env_server_fixtures import served_pair

    served = served_pair()
    directory = tmp_path / "environments" / "k"
    directory.mkdir(parents=True)
    pl.DataFrame(list(served.environments.values())).write_parquet(directory / "environments.parquet")
    pl.DataFrame(list(served.tasks.values())).write_parquet(directory / "tasks.parquet")
    return directory


@pytest.mark.parametrize("format", ["trl", "verl", "skyrl"])
def test_environment_tasks_export_as_episodes_to_start(environment_artifact: Path, tmp_path, format: str) -> None:
    """`--format trl` rows select their TRL environment class and task; verl's and SkyRL's name the task and its
    tools. Before this, an environment task had no prompt and the trl export failed."""
    from datasets import load_dataset
    from env_server_fixtures import served_pair

    from inference.environments.trl import environment_factories

    out = tmp_path / f"{format}.parquet"
    result = CliRunner().invoke(app, ["export", "--artifact", str(environment_artifact), "--format", format,
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    served = served_pair()
    tasks = [served.tasks[t] for t in sorted(served.tasks)]
    assert [p[1]["content"] for p in data["prompt"]] == [t["description"] for t in tasks]
    assert [p[0]["role"] for p in data["prompt"]] == ["system"] * len(tasks)
    if format == "trl":
        assert data["task_id"] == sorted(served.tasks)
        assert set(data["environment"]) <= set(environment_factories(served))
        return
    rule = data["reward_model" if format == "verl" else "reward_spec"]
    assert [r["ground_truth"] for r in rule] == sorted(served.tasks)
    for extra, task in zip(data["extra_info"], tasks, strict=True):
        names = [t["function"]["name"] for t in json.loads(extra["tools"])]
        assert names[-1] == "respond" and {a["name"] for a in json.loads(task["golden_actions"])} <= set(names)
        assert extra["interaction_kwargs"] == {"name": "gymforge", "task_id": task["task_id"],
                                               "env_id": task["env_id"], "noise_level": 0}


@pytest.mark.parametrize("format", ["verl", "skyrl"])
def test_rl_mix_exports_as_rl_parquet(tmp_path, format: str) -> None:
    from datasets import load_dataset

    frame = rl_ready()["rl_mix"]
    artifact, out = tmp_path / "rl_mix.parquet", tmp_path / "train.parquet"
    frame.write_parquet(artifact)
    result = CliRunner().invoke(app, ["export", "--artifact", str(artifact), "--format", format, "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    rule = data["reward_model" if format == "verl" else "reward_spec"]
    assert [r["ground_truth"] for r in rule] == [str(a) for a in frame["answer"]]
    assert [json.loads(e)["reward_fn"] for e in data["extra_info"]] == frame["reward_fn"].to_list()
    assert data["prompt"] == [json.loads(p) for p in frame["prompt"]]

"""midtrain_env on environment bundles: the same trajectories as on the environments artifact, and a bundle that
cannot be run is one error naming it, before any item is played."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from longctx_fixtures import tokenizer_artifact
from midtrain_fixtures import environments

from data_contracts.stage import FrameArtifact, StageError
from envgen.bundle import write_bundle
from tasks.environments.records import ENVIRONMENT
from tasks.midtrain.midtrain_env import bundle_environments, midtrain_env

PARAMS = {"n_tasks": 2, "variants_per_task": 1}


def _bundles(root: Path) -> Path:
    for env in environments()[:2]:
        write_bundle(root, env, [])
    return root


def test_bundles_give_the_trajectories_the_artifact_gives(tmp_path: Path) -> None:
    root = _bundles(tmp_path / "bundles")
    tok = tokenizer_artifact()
    artifact = FrameArtifact({"environments": ENVIRONMENT.frame(environments()[:2])})
    from_artifact = midtrain_env.run({"environments": artifact, "tokenizer": tok}, midtrain_env.parse_params(PARAMS),
                                     "t")["trajectories"]
    from_bundles = midtrain_env.run({"tokenizer": tok}, midtrain_env.parse_params({**PARAMS, "bundles": str(root)}),
                                    "t")["trajectories"]
    assert from_bundles.height >= 1
    # verify_input differs only in how the bundle's env.json re-serializes the spec
    assert from_bundles.drop("verify_input").equals(from_artifact.drop("verify_input"))
    assert midtrain_env.parse_params({"bundles": str(root)}).local_inputs()[-1] == str(root)


def _corrupt(path: Path, kind: str) -> str:
    """Break the bundle at ``path`` one way; returns what the error must say."""
    env_json = path / "env.json"
    if kind == "missing_file":
        (path / "db.sqlite").unlink()
        return "lacks db.sqlite"
    if kind == "bad_json":
        env_json.write_text("{not json")
        return "invalid JSON"
    record = json.loads(env_json.read_text())
    if kind == "not_sqlite":
        (path / "db.sqlite").write_bytes(b"garbage" * 10)
        return "not a SQLite database"
    if kind == "bad_spec":
        record["spec_json"] = {"name": "x"}
        record["spec_hash"] = "corrupt"
    elif kind == "unknown_tool":
        record["tool_names"] = [*record["tool_names"], "launch_rocket"]
    elif kind == "missing_field":
        del record["tool_names"]
    env_json.write_text(json.dumps(record))
    return {"bad_spec": "not a valid domain spec", "unknown_tool": "launch_rocket",
            "missing_field": "lacks tool_names"}[kind]


@pytest.mark.parametrize("kind", ["missing_file", "bad_json", "not_sqlite", "bad_spec", "unknown_tool",
                                  "missing_field"])
def test_a_corrupt_bundle_is_one_error_naming_it(tmp_path: Path, kind: str) -> None:
    root = _bundles(tmp_path / "bundles")
    broken = sorted(p for p in root.iterdir())[1]
    says = _corrupt(broken, kind)
    with pytest.raises(StageError) as err:
        bundle_environments(root)
    message = str(err.value)
    assert str(broken) in message and says in message and "\n" not in message
    with pytest.raises(StageError, match="holds no environment bundle"):
        bundle_environments(tmp_path)  # not a directory of bundles


def test_each_task_is_one_base_task_and_a_failed_sample_costs_none(monkeypatch) -> None:
    """Before: 86 environment-route rows of a demo root came from 10 base tasks (12 tasks played twice, 2 lost).
    Now a task is played once by default and sampled again on the next environment when a sample fails."""
    import tasks.midtrain.midtrain_env as stage
    from tasks.midtrain.synth import Unusable

    real, calls = stage.sample_task, []

    def flaky(env, rng, *args, **kwargs):  # every other first sample fails, as on an environment without a lookup
        calls.append(env["env_id"])
        if len(calls) % 2:
            raise Unusable("no tool to identify the customer")
        return real(env, rng, *args, **kwargs)

    monkeypatch.setattr(stage, "sample_task", flaky)
    params = midtrain_env.parse_params({"n_tasks": 6, "refusal_share": 0.0})
    items, rejected = stage.plan_items(environments(), params, "t")
    assert rejected == [] and len(items) == 6
    assert len({episode.task["task_id"] for _, episode, _ in items}) == 6
    assert len(calls) == 12 and calls[0] != calls[1]  # the second sample is on the next environment

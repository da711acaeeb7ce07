"""The SFT model artifact through the store: published atomically with its card and lineage, resolved by key by
the engines and `gymforge serve`, cached on an identical re-run."""

from __future__ import annotations

from pathlib import Path

import pytest
from sft_fixtures import double_trajectories, micro_base

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from inference.checkpoint import checkpoint_directory, read_card
from training.sft import SFTParams, sft


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = tmp_path_factory.mktemp("root")
    base = micro_base(tmp_path_factory.mktemp("base") / "base")
    store, catalog = open_store(root), Catalog(root)
    data = execute_stage(store, catalog, double_trajectories, {}, {}, "p0")
    params = SFTParams(model_name_or_path=str(base), max_steps=3, learning_rate=1e-2, use_cpu=True,
                       max_length=1024, eval_tool_calls=1, save_steps=2)
    stage = sft.with_inputs(["test_double_trajectories"])
    run = execute_stage(store, catalog, stage, params, {"test_double_trajectories": data.key}, "p0")
    return root, run.key, data.key


def test_the_model_is_published_with_its_card_and_lineage(published):
    root, key, data_key = published
    artifact = open_store(root).get("sft", key)
    card = read_card(artifact.directory)
    assert card["data"] == {"test_double_trajectories": data_key} and card["steps"] == 3
    assert card["code_version"]["git_sha"] and artifact.manifest["kind"] == "model"
    assert artifact.manifest["contract"]["model"]["passed"]
    lineage = Catalog(root).lineage(key)
    assert lineage.filter(lineage["input_key"] == data_key).height == 1
    assert Catalog(root).entry(key).kind == "model"


def test_an_identical_run_is_a_cache_hit(published):
    root, key, data_key = published
    again = execute_stage(open_store(root), Catalog(root), sft.with_inputs(["test_double_trajectories"]),
                          open_store(root).get("sft", key).manifest["params"],
                          {"test_double_trajectories": data_key}, "p0")
    assert again.cached and again.key == key


def test_engines_take_a_model_artifact_key(published, monkeypatch):
    from inference.engine import Request, SamplingParams
    from inference.engine_factory import load_engine

    root, key, data_key = published
    assert checkpoint_directory(key, root) == open_store(root).get("sft", key).directory
    monkeypatch.setenv("GYMFORGE_DATA", str(root))
    engine = load_engine(f"hf:{key}")
    [[completion]] = engine.generate([Request(messages=[{"role": "user", "content": "Book 2 seats"}],
                                              sampling=SamplingParams(0.0, 1.0, 4))])
    assert completion.token_ids
    with pytest.raises(ValueError, match=f"artifact {data_key} is a data artifact of stage "
                                         "'test_double_trajectories', not a model"):
        load_engine(f"hf:{data_key}")
    with pytest.raises(ValueError, match="no artifact with that key in the catalog"):
        load_engine("hf:" + "0" * 20)


def test_serve_takes_a_model_artifact_key(published, monkeypatch):
    from typer.testing import CliRunner

    import inference.server
    from flows.cli import app

    root, key, _ = published
    served = {}
    monkeypatch.setattr(inference.server, "serve", lambda path, **kw: served.update(path=path, **kw))
    result = CliRunner().invoke(app, ["--data-dir", str(root), "serve", "--model", key, "--port", "1"])
    assert result.exit_code == 0, result.output
    assert served["path"] == open_store(root).get("sft", key).directory and served["served_model_name"] == key
    result = CliRunner().invoke(app, ["--data-dir", str(root), "serve", "--model", "f" * 20])
    assert result.exit_code != 0 and "no artifact with that key" in result.output

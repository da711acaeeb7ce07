"""The `evaluate` stage through the store: a served test-double engine of known accuracy measured as configured, an
endpoint that goes down mid-run (one clear error, nothing published, the outage never scored; the next run resumes
where it stopped), a model that does not load, an unknown suite, and training-data overlap found by walking a model's
lineage in the catalog."""

from __future__ import annotations

import json

import polars as pl
import pytest
from eval_fixtures import EngineServer, prompt_item, serve, trained_model, trainset
from eval_fixtures import finetuned as finetuned_model
from pydantic import ValidationError

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from data_contracts.store import ArtifactStore
from inference.testing import BernoulliTestEngine
from training.evaluate import EvaluateParams, evaluate, overlap, suite_items, training_ids

# Four hard and four four-choice problems; the HTTP engine fails fast so an outage is seen at once.
MATH = {"n_hard": 4, "n_easy": 4}
FAST = {"max_retries": 1, "backoff_s": 0.0}


@pytest.fixture()
def root(tmp_path):
    from flows.registry import stage_named

    store, catalog = open_store(tmp_path / "data"), Catalog(tmp_path / "data")
    key = execute_stage(store, catalog, stage_named("math_seeds"), MATH, {}, "eval").key
    return store, catalog, key


def known_engine(store: ArtifactStore, key: str) -> BernoulliTestEngine:
    """Right on every even item, wrong on every odd one: accuracy 0.5 exactly."""
    items = suite_items("math", {"math_seeds": store.get("math_seeds", key)})
    return BernoulliTestEngine({str(item.messages[-1]["content"]): (float(i % 2 == 0), str(item.answer))
                                for i, item in enumerate(items)})


def params(url: str, tmp_path, **extra) -> EvaluateParams:
    return EvaluateParams(suite="math", engine=f"openai:{url}#scripted", engine_options=FAST, ks=(1, 2),
                          strategies=("single", "self_consistency"), batch_size=2,
                          resamples=100, checkpoint_dir=str(tmp_path / "ckpt"), **extra)


def headline(store: ArtifactStore, key: str, strategy: str, k: int, metric: str) -> dict:
    summary = store.get("evaluate", key).read("summary")
    return summary.filter((pl.col("strategy") == strategy) & (pl.col("k") == k) & (pl.col("metric") == metric)
                          & (pl.col("group") == "all")).row(0, named=True)


def test_a_served_engine_is_measured_as_configured(root, tmp_path):
    store, catalog, key = root
    server = EngineServer(known_engine(store, key))
    with serve(server) as url:
        run = execute_stage(store, catalog, evaluate.with_inputs(["math_seeds"]), params(url, tmp_path), {"math_seeds": key},
                            "eval")
    items = store.get("evaluate", run.key).read("items")
    assert set(items["status"]) == {"scored"} and items["item_id"].n_unique() == 8
    assert headline(store, run.key, "sample", 2, "avg@k")["estimate"] == 0.5
    assert headline(store, run.key, "single", 1, "accuracy")["estimate"] == 0.5
    assert headline(store, run.key, "sample", 2, "pass@k")["n"] == 8
    assert set(catalog.entry(run.key).input_keys.values()) == {key}


def test_an_endpoint_down_mid_run_is_one_error_and_the_next_run_resumes(root, tmp_path):
    store, catalog, key = root
    server = EngineServer(known_engine(store, key), fail_after=2)  # the first batch of two, then 503s
    stage, p = evaluate.with_inputs(["math_seeds"]), None
    with serve(server) as url:
        p = params(url, tmp_path)
        with pytest.raises(StageError, match=r"failed on 6 of 8 items .*HTTP 503 after 2 attempts.*run the evaluation again"):
            execute_stage(store, catalog, stage, p, {"math_seeds": key}, "eval")
        assert catalog.entries(stage="evaluate") == []  # nothing published
        done = [json.loads(line) for line in (tmp_path / "ckpt" / "items.jsonl").read_text().splitlines()]
        assert len(done) == 2 and all(r["status"] == "scored" for entry in done for r in entry["rows"])

        server.down, server.fail_after, answered = False, None, server.answered
        run = execute_stage(store, catalog, stage, p, {"math_seeds": key}, "eval")
    assert server.answered - answered == 6  # only the items the outage stopped
    items = store.get("evaluate", run.key).read("items")
    assert set(items["status"]) == {"scored"} and items["item_id"].n_unique() == 8
    assert headline(store, run.key, "sample", 2, "avg@k")["estimate"] == 0.5  # the outage scored nothing wrong


def test_a_tolerated_outage_publishes_the_items_unscored(root, tmp_path):
    store, catalog, key = root
    server = EngineServer(known_engine(store, key), down=True)
    with serve(server) as url:
        run = execute_stage(store, catalog, evaluate.with_inputs(["math_seeds"]), params(url, tmp_path, max_infra_error_fraction=1.0),
                            {"math_seeds": key}, "eval")
    items = store.get("evaluate", run.key).read("items")
    assert set(items["status"]) == {"infra_error"} and items["score"].null_count() == items.height
    row = headline(store, run.key, "sample", 2, "avg@k")
    assert row["n"] == 0 and row["n_infra_errors"] == 8 and row["estimate"] is None


def test_bad_input_is_one_clear_error(root, tmp_path):
    store, catalog, key = root
    stage = evaluate.with_inputs(["math_seeds"])
    with pytest.raises(StageError, match=r"model hf:.*missing.* does not load"):
        execute_stage(store, catalog, stage, {"suite": "math", "engine": f"hf:{tmp_path / 'missing'}"},
                      {"math_seeds": key}, "eval")
    with pytest.raises(ValidationError, match="unknown suite 'nope'; suites: keychain"):
        EvaluateParams(suite="nope")
    with pytest.raises(StageError, match="exactly one model"):
        execute_stage(store, catalog, stage, {"suite": "math"}, {"math_seeds": key}, "eval")
    with pytest.raises(StageError, match=r"suite 'qa' reads \['qa_seeds'\]"):
        execute_stage(store, catalog, stage, {"suite": "qa", "engine": "openai:http://127.0.0.1:9/v1#m"},
                      {"math_seeds": key}, "eval")
    assert catalog.entries(stage="evaluate") == []


def test_training_data_is_found_through_the_models_lineage(tmp_path):
    store, catalog = open_store(tmp_path), Catalog(tmp_path)
    data = execute_stage(store, catalog, trainset, {}, {}, "p0").key
    base = execute_stage(store, catalog, trained_model, {}, {"test_double_trainset": data}, "p0").key
    tuned = execute_stage(store, catalog, finetuned_model, {}, {"test_double_trained_model": base}, "p0").key
    trained = training_ids(catalog, store, tuned)  # the fine-tuned model's data is its base model's
    assert trained == {"q1", "seed2"}  # q3 is in the eval split: not training data
    items = [prompt_item(i) for i in range(1, 4)]  # q1 by its own id, q2 by its seed id, q3 not at all
    assert overlap(items, trained) == ("q1", "q2")

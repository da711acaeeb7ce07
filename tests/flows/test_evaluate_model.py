"""`gymforge eval` and the `evaluate` flow: bad input (an unknown suite, an endpoint that is down, a model that does not
load, a comparison with nothing to compare) is one clear error before anything starts; on a real Prefect server the
tiny profile's flow measures a served test double at its configured accuracy, re-runs from the cache, evaluates a
tiny checkpoint the same way, flags the items a model artifact's lineage trained on, and compares two models with a
report."""

from __future__ import annotations

import pytest
from inference_support import tiny_checkpoint
from typer.testing import CliRunner

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from flows.cli import app

DEAD = "openai:http://127.0.0.1:9/v1#m"


@pytest.mark.parametrize(("args", "message"), [
    (["--model", DEAD, "--suites", "math,nope"], "unknown suite 'nope'; suites: keychain"),
    (["--model", DEAD, "--suites", "math"], "endpoint http://127.0.0.1:9/v1 does not answer"),
    (["--model", "hf:{tmp}", "--suites", "math"], "is not a transformers checkpoint directory"),
    (["--model", "openai:localhost#m", "--suites", "math"], "expected openai:http(s)://HOST:PORT/v1#MODEL"),
    (["--model", DEAD, "--suites", "math", "--set", "ks=[4,2]"], "ascending order"),
])
def test_bad_input_is_one_error_before_anything_starts(args, message, tmp_path, monkeypatch):
    monkeypatch.setenv("GYMFORGE_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = CliRunner().invoke(app, ["eval", "run", *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    assert result.exit_code != 0
    assert message in str(result.exception) + result.output
    assert not (tmp_path / "data" / "prefect").exists()  # no server was started


def test_compare_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("GYMFORGE_DATA", str(tmp_path))
    result = CliRunner().invoke(app, ["eval", "compare", "openai:http://h:1/v1#a", "openai:http://h:1/v1#b"])
    assert isinstance(result.exception, StageError) and "no evaluation of 'openai:http://h:1/v1#a'" in str(
        result.exception)


@pytest.mark.integration
@pytest.mark.slow
def test_the_flow_measures_a_known_engine_and_a_checkpoint_and_compares_them(tmp_path, monkeypatch, runtime):
    import polars as pl
    from eval_fixtures import EngineServer, serve, tiny_model, trainset

    from flows.evaluate_model import compare_models, evaluate_model
    from flows.registry import stage_named
    from flows.runtime import Runtime
    from inference.testing import BernoulliTestEngine
    from training.evaluate import suite_items

    data = tmp_path / "data"
    store = open_store(data)
    # The tiny profile's math suite: 6 hard and 6 four-choice problems on their own partition (made here first to
    # configure the test double on them; the flow then finds them in the cache).
    math = execute_stage(store, Catalog(data), stage_named("math_seeds"), {"n_hard": 6, "n_easy": 6}, {}, "eval")
    items = suite_items("math", {"math_seeds": store.get("math_seeds", math.key)})
    p = 0.5
    double = BernoulliTestEngine({str(i.messages[-1]["content"]): (p, str(i.answer)) for i in items}, exact=False)
    overrides = {"max_items": 12, "strategies": ["single", "self_consistency", "best_of_k"]}
    with Runtime(data, prefect_api_url=runtime.prefect_api_url, dask=False), serve(EngineServer(double)) as url:
        spec = f"openai:{url}#scripted"
        known = evaluate_model(model=spec, suites=["math"], profile="tiny", data_dir=str(data),
                         overrides={**overrides, "engine_options": {"max_retries": 0}})
        monkeypatch.setenv("GYMFORGE_DATA", str(data))  # the CLI runs the same flow on this server and root
        again = CliRunner().invoke(app, ["eval", "run", "--model", spec, "--suites", "math", "--set", "max_items=12",
                                         "--set", "strategies=[single, self_consistency, best_of_k]",
                                         "--set", "engine_options={max_retries: 0}"])
        checkpoint = f"hf:{tiny_checkpoint()}"
        short = {"max_items": 12, "ks": [1], "strategies": ["single"], "sampling": {"max_tokens": 4}}
        tiny = evaluate_model(model=checkpoint, suites=["math"], profile="tiny", data_dir=str(data), overrides=short)
        # A model artifact whose training data (its lineage) holds one of the suite's items: flagged, left out.
        trained = execute_stage(store, Catalog(data), trainset, {"ids": [items[0].id], "eval_ids": []}, {}, "p0").key
        model = execute_stage(store, Catalog(data), tiny_model, {}, {"test_double_trainset": trained}, "p0").key
        flagged = evaluate_model(model=model, suites=["math"], profile="tiny", data_dir=str(data), overrides=short)
    [run] = known["evaluations"]
    assert again.exit_code == 0, again.output
    assert not run["cached"] and f"math [eval] {run['key']} (cached)" in again.output and "report:" in again.output
    avg = next(r for r in run["headline"] if r["metric"] == "avg@k" and r["strategy"] == "sample")
    assert avg["n"] == 12 and avg["ci_lo"] <= p <= avg["ci_hi"]  # the metrics measure the configured accuracy
    assert (data / "reports").is_dir() and tiny["report"].endswith(".html")
    [seen] = flagged["evaluations"]
    single = next(r for r in seen["headline"] if r["strategy"] == "single")
    assert seen["overlap"] == 1 and (single["n"], single["n_overlap"]) == (11, 1)
    assert store.get("evaluate", seen["key"]).manifest["input_keys"]["test_double_tiny_model"] == model
    assert not any((data / "checkpoints" / "evaluate").iterdir())  # published: nothing left to resume

    label_a, label_b, table = compare_models(spec, checkpoint, data_dir=str(data), html=tmp_path / "ab.html")
    assert (label_a, label_b) == (spec, checkpoint) and not table.is_empty()
    single = table.filter((pl.col("strategy") == "single") & (pl.col("k") == 1)).row(0, named=True)
    assert single["n"] == 12 and single["ci_lo"] <= single["difference"] <= single["ci_hi"]
    page = (tmp_path / "ab.html").read_text()
    assert "<img" in page and spec in page

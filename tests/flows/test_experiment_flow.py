"""The `experiment` flow on a real Prefect server with the tiny model: two arms of real RL on a test-double prompt
artifact, scored on held-out prompts; every arm's model and scores are catalog artifacts with lineage, the report
is a page under the data root, and a re-run is cache hits."""

from __future__ import annotations

import pytest
from inference_support import tiny_checkpoint
from rl_fixtures import double_prompts

from flows.experiments import declared
from flows.experiments.config import Experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRAIN = {"steps": 2, "batch_size": 8, "num_generations": 4, "controllers": 1, "concurrency": 4,
         "checkpoint_every": 2, "sampling": {"max_tokens": 8}}


def test_the_flow_publishes_arms_as_artifacts_with_lineage_and_a_report(tmp_path, monkeypatch, runtime):
    """Slow (about 25-30 s on 2 cores) by its subject: two RL runs, each with a controller process that imports
    torch and transformers, and three held-out scorings."""
    from data_contracts.catalog import Catalog
    from flows.experiments.flow import experiment_flow
    from flows.runtime import Runtime

    assert double_prompts.name == "test_double_prompts"
    experiment = Experiment(
        name="flow_test", title="two learning rates", claim="test double", expected="fast > slow",
        base={"model": str(tiny_checkpoint())},
        arms={"fast": {"description": "lr 1e-3", "train_on": ["test_double_prompts"],
                       "train": {"learning_rate": 1e-3}},
              "slow": {"description": "lr 1e-5", "train_on": ["test_double_prompts"],
                       "train": {"learning_rate": 1e-5}}},
        evaluation={"heldout": ["test_double_prompts"], "score": {"k": 2, "max_tokens": 8}},
        statistics={"metrics": ["mean_reward"], "resamples": 200}, seeds=1, budgets={"default": TRAIN})
    monkeypatch.setitem(declared.EXPERIMENTS, "flow_test", experiment)
    data = tmp_path / "data"
    with Runtime(data, prefect_api_url=runtime.prefect_api_url, dask=False):
        first = experiment_flow(name="flow_test", data_dir=str(data))
        again = experiment_flow(name="flow_test", data_dir=str(data))
    catalog = Catalog(data)
    scores = catalog.entries(stage="heldout_score", status="published")
    assert len(scores) == 3  # one per arm and the base model's; the re-run made none
    models = [score.input_keys["rl"] for score in scores if "rl" in score.input_keys]
    assert len(models) == 2
    assert sum("test_double_prompts" in catalog.inputs(model) for model in set(models)) == 2
    page = data / "experiments" / "flow_test" / "flow_test-tiny-default-model-1seeds.md"
    assert str(page) == first["page"] == again["page"]
    text = page.read_text()
    assert "| mean_reward | all | fast − slow |" in text and "## Conclusion" in text
    assert "| mean_reward | all | " in text.split("The base model before training")[1]  # scored once, a cache hit after
    assert "| fast: most common training answer | mean_reward | all |" in text  # the prior-only baselines
    assert (page.parent / "flow_test-tiny-default-model-1seeds.scores.parquet").is_file()

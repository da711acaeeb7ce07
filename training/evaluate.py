"""Stage `evaluate`: one suite variant under one model, as an artifact (per-item rows + summary).

Inputs are resolved per run (``Stage.with_inputs``, as the ``sft`` stage does): the suite's data artifacts and, unless
``engine`` names one, the model as a model artifact (evaluated in-process with transformers). Any engine spec works
the same way: ``openai:URL#MODEL`` (a hosted model, ``vllm serve``, ``gymforge serve``), ``hf:DIR``, ``vllm:DIR``.
Items come from the suite (``inference.evaluation.suites``), tasks through ``training.async_rl.sources.load_tasks``; the
strategies run over the engine (``inference.evaluation.strategies``) and the summary is computed from the rows
(``inference.evaluation.summary``).

The evaluate flow walks the model's lineage in the catalog and passes the suite items found in its training data
as ``overlap_ids`` (:func:`training_overlap`); they are flagged and left out of the summary. Finished items are
kept under ``checkpoint_dir`` as they finish, so a run stopped by an engine outage resumes; the outage is never
scored as wrong answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from data_contracts.catalog import Catalog
from data_contracts.schemas import in_set
from data_contracts.stage import Artifact, Check, StageError, stage
from data_contracts.store import ArtifactStore
from inference.engine import Engine
from inference.engine_spec import hf_spec
from inference.evaluation.items import EvalItem
from inference.evaluation.strategies import Checkpoint, Context, EvalConfig, cap, run_items
from inference.evaluation.suites import SUITES, SuiteSettings, get_suite
from inference.evaluation.summary import EVAL_SUMMARY, summarize
from training.records import EVAL_ITEM

STAGE = "evaluate"
ID_COLUMNS = ("id", "seed_id", "task_id", "source_id", "clean_task_id", "env_id")
"""Columns of training data whose values name the items a model saw."""


class EvaluateParams(EvalConfig):
    suite: str = Field("math", description="the suite this artifact evaluates: " + ", ".join(SUITES))
    engine: str | None = Field(None, description="engine spec of the model when it is not a model artifact input: "
                                                 "openai:URL#MODEL, hf:DIR or vllm:DIR")
    summary_engine: str | None = Field(None, description="Heavy Thinking's summary model (an engine spec); None: "
                                                         "the evaluated model itself")
    engine_options: dict[str, Any] = Field(
        default_factory=dict, description="keyword options of the engines (openai: max_concurrency, timeout_s, "
        "max_retries, backoff_s; hf: device, dtype, max_batch_size)")
    resamples: int = Field(1000, ge=100, description="bootstrap resamples of every interval")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="coverage of the bootstrap intervals")
    overlap_ids: tuple[str, ...] = Field((), description="ids of suite items found in the model's training data "
                                                         "(the evaluate flow fills it from the catalog lineage)")
    suites: dict[str, SuiteSettings] = Field(
        default_factory=dict, exclude=True, description="per suite: held-out variants and evaluate overrides the "
        "flow applies (not part of an artifact's params: each artifact records what it ran with)")
    checkpoint_dir: str | None = Field(None, exclude=True, description="where finished items are kept until "
                                                                       "the artifact is published (resume)")
    progress: bool = Field(False, exclude=True, description="show a progress bar")

    @field_validator("suite")
    @classmethod
    def _known(cls, v: str) -> str:
        get_suite(v)
        return v

    @field_validator("suites")
    @classmethod
    def _known_suites(cls, v: dict[str, SuiteSettings]) -> dict[str, SuiteSettings]:
        for name in v:
            get_suite(name)
        return v

    def local_inputs(self) -> list[str]:
        from inference.engine_spec import EngineSpec

        specs = [EngineSpec.named_in(s) for s in (self.engine, self.summary_engine) if s]
        return [s.target for s in specs if s and s.local and Path(s.target).is_dir()]


def _no_infra_scored(frame: pl.DataFrame) -> pl.Series:
    """An infrastructure error carries no score."""
    return (frame["status"] == "infra_error") & frame["score"].is_not_null()


@stage(name=STAGE, version="2", params=EvaluateParams, resources="gpu",
       outputs={"items": EVAL_ITEM.contract(
                    expectations=(in_set("status", ["scored", "infra_error"]),),
                        checks=(Check("infra_errors_unscored", _no_infra_scored,
                                  description="an item the engine could not serve has no score"),)),
                "summary": EVAL_SUMMARY.contract()})
def evaluate(inputs: Mapping[str, Artifact], params: EvaluateParams, partition: str) -> dict[str, pl.DataFrame]:
    """A suite variant under a model (artifact or engine spec): per-item rows and the summary."""
    suite = get_suite(params.suite)
    spec, data = model_spec(inputs, params)
    missing = [name for name in suite.stages if name not in data]
    if missing:
        raise StageError(f"suite {suite.name!r} reads {list(suite.stages)}; inputs lack {missing}")
    items = suite_items(suite.name, {name: data[name] for name in suite.stages})
    items = cap(items, params.max_items)
    if not items:
        raise StageError(f"suite {suite.name!r} variant {partition!r} has no items in {sorted(data)}")
    strategies = params.strategies if params.strategies is not None else suite.strategies
    context = Context(suite.name, partition, params, frozenset(params.overlap_ids), tuple(strategies))
    engine = load(spec, params)
    summary_engine = load(params.summary_engine, params) if params.summary_engine else None
    try:
        outcome = run_items(engine, items, context, summary_engine=summary_engine,
                            checkpoint=Checkpoint(Path(params.checkpoint_dir) if params.checkpoint_dir else None),
                            progress=params.progress)
    finally:
        engine.close()
        if summary_engine is not None:
            summary_engine.close()
    failed = outcome.infra_errors
    if len(failed) > params.max_infra_error_fraction * len(items):
        where = f"; the {len(items) - len(failed)} finished are kept in {params.checkpoint_dir}" \
            if params.checkpoint_dir else ""
        raise StageError(f"engine {spec} failed on {len(failed)} of {len(items)} items ({next(iter(failed.values()))})"
                         f"{where}: run the evaluation again to resume")
    frame = EVAL_ITEM.frame(outcome.rows).sort("item_id", "strategy", "k")
    return {"items": frame, "summary": summarize(frame, suite.breakdowns, params.ks, resamples=params.resamples,
                                                 confidence=params.confidence, seed=params.seed)}


def model_spec(inputs: Mapping[str, Artifact], params: EvaluateParams) -> tuple[str, dict[str, Artifact]]:
    """The engine spec of the model (``hf:`` of the one model artifact input, or ``engine``) and the data inputs."""
    models = {name: a for name, a in inputs.items() if a.manifest.get("kind") == "model"}
    data = {name: a for name, a in inputs.items() if name not in models}
    if len(models) + bool(params.engine) != 1:
        raise StageError("evaluate takes exactly one model: a model artifact input or an engine spec (got "
                         f"{sorted(models) + ([params.engine] if params.engine else []) or 'none'})")
    if params.engine:
        return params.engine, data
    (artifact,) = models.values()
    return hf_spec(artifact.directory), data


def load(spec: str, params: EvaluateParams) -> Engine:
    """The engine a spec names; a StageError says why a model does not load."""
    from inference.engine_factory import load_engine

    try:
        return load_engine(spec, **params.engine_options)
    except Exception as exc:  # noqa: BLE001 - whatever the loader raises, the user needs the model named
        raise StageError(f"model {spec} does not load: {type(exc).__name__}: {exc}") from None


def suite_items(name: str, data: Mapping[str, Artifact]) -> list[EvalItem]:
    """A suite's items from its data artifacts (tasks read by ``load_tasks`` where the suite takes them)."""
    from training.async_rl.sources import load_tasks

    suite = get_suite(name)
    return suite.read(data, load_tasks(data) if suite.uses_tasks else [])


# --- training-data overlap --------------------------------------------------------------------------------------


def training_ids(catalog: Catalog, store: ArtifactStore, model_key: str) -> set[str]:
    """Every id (``ID_COLUMNS``) in the data the model and the models it was built from were trained on: the direct
    data inputs of each model artifact on its lineage. Rows of an eval split are not training data."""
    models = [model_key, *(key for key in catalog.lineage(model_key)["input_key"]
                           if (entry := catalog.entry(key)) is not None and entry.kind == "model")]
    ids: set[str] = set()
    for key in dict.fromkeys(models):
        for input_stage, input_key in catalog.inputs(key).items():
            artifact = store.get(input_stage, input_key)
            if artifact is None or artifact.manifest.get("kind") == "model":
                continue
            for output in artifact.outputs:
                frame = artifact.scan(output)
                names = frame.collect_schema().names()
                if "split" in names:
                    frame = frame.filter(pl.col("split") != "eval")
                for column in (c for c in ID_COLUMNS if c in names):
                    ids.update(v for v in frame.select(pl.col(column).cast(pl.String)).collect().to_series()
                               if v is not None)
    return ids


def overlap(items: Sequence[EvalItem], trained: set[str]) -> tuple[str, ...]:
    """The ids of items known by an id the model trained on."""
    return tuple(sorted(item.id for item in items if trained & set(item.known_as)))


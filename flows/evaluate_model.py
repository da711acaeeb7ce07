"""The `evaluate-model` flow: a model (a model artifact, or any engine spec) on declared suites, as evaluation
artifacts in the catalog, an HTML report under the data root and the same report as Prefect artifacts.

GPU work runs as a flow of its own (``gymforge eval run`` in-process, or the ``evaluate-model`` deployment on the ``gpu``
pool, one run at a time; never inside a Dask worker). Per suite and held-out variant it materializes the data
artifact (a cache hit when it exists; a new partition per prompt length), flags the items the model trained on
(the catalog's lineage of the model), and runs the ``evaluate`` stage through the store: one artifact per model,
suite and variant, so adding a suite or a length never recomputes the others, and an identical re-run is a cache
hit. Finished items are kept under ``<data root>/checkpoints/evaluate/<artifact key>`` until the artifact is
published: an evaluation stopped by an engine outage resumes when run again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from data_contracts.catalog import Catalog
from data_contracts.roots import data_root, open_store
from data_contracts.runner import StageRun, execute_stage, run_serially
from data_contracts.stage import Stage, StageError
from data_contracts.store import ArtifactStore, PublishedArtifact
from flows.failures import fails_cleanly
from flows.live import live_progress
from flows.profiles import parse, stage_params
from flows.registry import stage_named
from flows.train import published
from inference.engine_spec import EngineSpec, EngineSpecError
from inference.evaluation.report import (
    budget_figure,
    headline,
    length_figure,
    markdown_table,
    pooled,
    robustness_figure,
    write_report,
)
from inference.evaluation.suites import Suite, check_suites, get_suite
from inference.evaluation.summary import compare
from training.evaluate import EvaluateParams, overlap, suite_items, training_ids
from training.evaluate import evaluate as evaluate_stage


@dataclass(frozen=True)
class ModelRef:
    """What is evaluated: a model artifact (``key``, ``stage``) or an engine spec (``engine``)."""

    label: str
    key: str | None = None
    stage: str | None = None
    engine: str | None = None


@dataclass(frozen=True)
class VariantRun:
    """One evaluate stage execution: a suite variant under the model."""

    suite: str
    variant: str
    stage: Stage
    params: EvaluateParams
    input_keys: dict[str, str]
    key: str
    checkpoints: Path


def resolve_model(model: str, catalog: Catalog, store: ArtifactStore) -> ModelRef:
    """A model artifact (its key, ``hf:KEY``, or a stage with one published model) or an engine spec. A directory
    without a checkpoint, an artifact that is not a model and an endpoint that does not answer are StageErrors,
    before anything runs."""
    try:
        spec = EngineSpec.named_in(model)
    except EngineSpecError as exc:
        raise StageError(str(exc)) from None
    if spec is not None:
        if not spec.local:
            _probe(spec)
            return ModelRef(model, engine=model)
        path = Path(spec.target).expanduser()
        if path.is_dir() or spec.kind == "vllm":
            if not (path / "config.json").is_file():
                raise StageError(f"model {model}: {path} is not a transformers checkpoint directory (no config.json)")
            return ModelRef(model, engine=f"{spec.kind}:{path.resolve()}")
        model = spec.target
    artifact = published(catalog, store, model)
    if artifact.manifest.get("kind") != "model":
        raise StageError(f"{model!r} is artifact {artifact.stage}/{artifact.key} of kind "
                         f"{artifact.manifest.get('kind', 'data')}, not a model")
    return ModelRef(f"{artifact.stage}/{artifact.key}", key=artifact.key, stage=artifact.stage)


def _probe(spec: EngineSpec) -> None:
    """An OpenAI-compatible endpoint answers ``GET /models``; otherwise one clear error before the run."""
    import httpx

    url = spec.target
    try:
        httpx.get(f"{url}/models", timeout=10.0).raise_for_status()
    except httpx.HTTPError as exc:
        raise StageError(f"endpoint {url} does not answer ({type(exc).__name__}: {exc}); start the server "
                         "(vllm serve, gymforge serve) or fix the URL") from None


def settings(profile: str, overrides: Mapping[str, Any] | None) -> EvaluateParams:
    """The evaluate section of the profile plus overrides, validated (a typo names the field)."""
    params = parse("evaluate", stage_params(profile, {"evaluate": dict(overrides or {})})["evaluate"])
    assert isinstance(params, EvaluateParams)
    return params


def check(model: str, suites: Sequence[str], *, profile: str = "tiny", overrides: Mapping[str, Any] | None = None,
          data_dir: str | None = None) -> ModelRef:
    """Everything that can be wrong with a request, checked before any server starts: suites, params, the model."""
    check_suites(suites)
    settings(profile, overrides)
    root = data_root(data_dir)
    return resolve_model(model, Catalog(root), open_store(root))


def _materialize(store: ArtifactStore, catalog: Catalog, suite: Suite, profile_params: Mapping[str, Any],
                 overrides: Mapping[str, Any], partition: str, variant_partition: str) -> dict[str, StageRun]:
    """The suite's data artifacts for one variant: the first stage with the variant's overrides on its partition,
    the others and every upstream stage as the profile makes them on ``partition`` (cached when they exist)."""
    runs: dict[str, StageRun] = {}
    for index, name in enumerate(suite.stages):
        declared = stage_named(name)
        upstream = run_serially(store, catalog, list(declared.inputs), profile_params, partition, progress=False) \
            if declared.inputs else {}
        params = {**profile_params.get(name, {}), **(overrides if index == 0 else {})}
        runs[name] = execute_stage(store, catalog, declared, params, {n: upstream[n].key for n in declared.inputs},
                                   variant_partition if index == 0 else partition)
    return runs


def plan_evaluation(model: str, suites: Sequence[str], *, profile: str = "tiny",
                    overrides: Mapping[str, Any] | None = None, partition: str = "default",
                    data_dir: str | None = None) -> tuple[ModelRef, list[VariantRun]]:
    """Resolve the model, materialize every suite variant's data, flag training-data overlap, and derive each
    evaluate artifact's params, inputs, key and checkpoint directory."""
    root = data_root(data_dir)
    store, catalog = open_store(root), Catalog(root)
    ref = check(model, suites, profile=profile, overrides=overrides, data_dir=str(root))
    base = settings(profile, overrides)
    raw = stage_params(profile, {"evaluate": dict(overrides or {})})
    profile_params = {name: section for name, section in raw.items() if name != "evaluate"}
    trained = training_ids(catalog, store, ref.key) if ref.key else set()
    runs = []
    for suite in check_suites(suites):
        suite_settings = base.suites.get(suite.name)
        for variant in suite.variants(suite_settings):
            data = _materialize(store, catalog, suite, profile_params, variant.overrides, partition, variant.partition)
            artifacts = {name: store.get(name, run.key) for name, run in data.items()}
            items = suite_items(suite.name, artifacts)  # type: ignore[arg-type]
            update = {**suite.defaults, **(suite_settings.evaluate if suite_settings else {}), "suite": suite.name,
                      "engine": ref.engine, "overlap_ids": list(overlap(items, trained))}
            params = parse("evaluate", {**base.model_dump(exclude={"suites"}), **update})
            input_keys = {name: run.key for name, run in data.items()} | ({ref.stage: ref.key} if ref.key else {})
            stage = evaluate_stage.with_inputs(list(input_keys))
            key = store.artifact_key(stage, params, input_keys, variant.partition)
            checkpoints = Path(store.home) / "checkpoints" / stage.name / key
            params = params.model_copy(update={"checkpoint_dir": str(checkpoints)})
            runs.append(VariantRun(suite.name, variant.partition, stage, params, input_keys, key, checkpoints))
    return ref, runs


@task(task_run_name="evaluate/{run.suite}/{run.variant}", cache_policy=NO_CACHE)  # the store is the cache
def evaluate_task(run: VariantRun, data_dir: str, progress: bool = False) -> StageRun:
    from prefect.runtime import flow_run

    params = run.params.model_copy(update={"progress": progress})
    return execute_stage(open_store(data_dir), Catalog(data_dir), run.stage, params, run.input_keys,
                         run.variant, flow_run_id=flow_run.id)


# --- the report -------------------------------------------------------------------------------------------------------


def load_items(artifacts: Sequence[PublishedArtifact]) -> pl.DataFrame:
    return pl.concat([a.read("items") for a in artifacts], how="vertical") if artifacts else pl.DataFrame()


def build_report(evaluations: Mapping[str, Sequence[PublishedArtifact]], path: Path, title: str
                 ) -> tuple[Path, str]:
    """The HTML report of one or more models' evaluation artifacts (figures beside it), and its Markdown form for
    the Prefect UI. Figures pool a suite's variants; tables list every variant's headline figures."""
    from flows.figures import figure_markdown

    by_suite: dict[str, dict[str, list[PublishedArtifact]]] = {}
    for label, artifacts in evaluations.items():
        for artifact in artifacts:
            by_suite.setdefault(artifact.manifest["params"]["suite"], {}).setdefault(label, []).append(artifact)
    sections, markdown = [], [f"# {title}"]
    for suite_name, models in by_suite.items():
        suite = get_suite(suite_name)
        items = {label: load_items(artifacts) for label, artifacts in models.items()}
        ks = sorted({k for artifacts in models.values() for a in artifacts for k in a.manifest["params"]["ks"]})
        summaries = {label: pooled(frame, suite.breakdowns, ks, resamples=300) for label, frame in items.items()}
        stem = path.with_suffix("")
        figures = [budget_figure(summaries, suite.name, Path(f"{stem}-{suite.name}-budget.png")),
                   length_figure(items, suite.name, Path(f"{stem}-{suite.name}-length.png"))
                   if suite.length_param else None,
                   robustness_figure(summaries, Path(f"{stem}-{suite.name}-robustness.png"))
                   if suite.name == "noise" else None]
        tables = [headline(a.read("summary")).with_columns(pl.lit(label).alias("model"))
                  for label, artifacts in models.items() for a in artifacts]
        table = pl.concat(tables, how="vertical") if tables else pl.DataFrame()
        grouped = [s.filter(pl.col("group") != "all").with_columns(pl.lit(label).alias("model"))
                   for label, s in summaries.items()]
        columns = ("model", "variant", "strategy", "k", "metric", "group", "value", "n", "estimate", "ci_lo",
                   "ci_hi", "tokens", "n_overlap", "n_infra_errors", "failures")
        sections.append({"heading": f"{suite.name}: {suite.description}",
                         "text": f"models: {', '.join(models)}; widths {ks}",
                         "figures": [f for f in figures if f], "tables": [table.select(
                             [c for c in columns if c in table.columns]), *(g.select(
                                 [c for c in columns if c in g.columns]) for g in grouped)]})
        markdown.append(f"## {suite.name}\n\n" + markdown_table(table, columns))
        markdown += [figure_markdown(f, f"{suite.name} {f.stem.rsplit('-', 1)[-1]}") for f in figures if f]
    return write_report(sections, title, path), "\n\n".join(markdown)


def _run_name() -> str:
    from prefect.runtime import flow_run

    parameters = flow_run.parameters
    return f"evaluate {parameters.get('model')} on {','.join(parameters.get('suites') or [])}"


@flow(name="evaluate-model", flow_run_name=_run_name)
@fails_cleanly
def evaluate_model(
    model: str,
    suites: list[str],
    profile: str = "tiny",
    overrides: dict[str, Any] | None = None,
    partition: str = "default",
    data_dir: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Evaluate a model on suites; publishes one evaluation artifact per suite variant and the report.

    Args:
        model: a model artifact key (or a stage with one published model), or an engine spec: openai:URL#MODEL,
            hf:DIR, vllm:DIR.
        suites: suites to run: keychain, needles, qa, math, noise, random_tasks, context.
        profile: tiny | small | default | full, or a path to a profile YAML (its `evaluate` section).
        overrides: {param: value} of the evaluate params on top of the profile.
        partition: the partition the suites' upstream data comes from.
        data_dir: data root; none means $GYMFORGE_DATA, else ./data.
        progress: show a progress bar per suite variant (the CLI sets it).
    """
    logger = get_run_logger()
    root = data_root(data_dir)
    store = open_store(root)
    store.clean_partial()
    ref, runs = plan_evaluation(model, suites, profile=profile, overrides=overrides, partition=partition,
                                data_dir=str(root))
    evaluations, artifacts = [], []
    for run in runs:
        logger.info("evaluate %s on %s [%s] -> %s", ref.label, run.suite, run.variant, run.key)
        with live_progress():
            result = evaluate_task(run, str(root), progress)
        artifact = store.get(run.stage.name, result.key)
        if artifact is None:
            raise StageError(f"the evaluation artifact {result.key} disappeared from {root} right after the run")
        shutil.rmtree(run.checkpoints, ignore_errors=True)  # published: its finished items are in the artifact
        artifacts.append(artifact)
        summary = artifact.read("summary")
        evaluations.append({"suite": run.suite, "variant": run.variant, "key": result.key, "cached": result.cached,
                            "overlap": len(run.params.overlap_ids), "headline": headline(summary).to_dicts()})
    digest = hashlib.sha256(json.dumps(sorted(a.key for a in artifacts)).encode()).hexdigest()[:12]
    path, markdown = build_report({ref.label: artifacts}, Path(store.home) / "reports" /
                                  f"evaluate-{digest}.html", f"evaluation of {ref.label}")
    create_markdown_artifact(markdown=markdown, key="evaluation-report",
                             description=f"evaluation of {ref.label}: {path}")
    create_table_artifact(table=[{k: v for k, v in row.items() if k in ("suite", "variant", "strategy", "k", "metric",
                                                                         "estimate", "ci_lo", "ci_hi", "n")}
                                 for e in evaluations for row in e["headline"]] or [{"suite": "none"}],
                          key="evaluation-headline", description=f"evaluation of {ref.label}")
    return {"model": ref.label, "evaluations": evaluations, "report": str(path)}


# --- comparison ------------------------------------------------------------------------------------------------------


def evaluations_of(ref: str, catalog: Catalog, store: ArtifactStore) -> tuple[str, list[PublishedArtifact]]:
    """The published evaluation artifacts a reference names: an evaluation key, or every evaluation of a model (its
    artifact key, a stage with one model, or the engine spec it was evaluated as)."""
    rows = catalog.entries(stage="evaluate", status="published")
    if ref in {row.key for row in rows}:
        artifact = store.get("evaluate", ref)
        return ref, [artifact] if artifact else []
    label, key = ref, None
    try:
        engine = EngineSpec.named_in(ref)
    except EngineSpecError as exc:
        raise StageError(str(exc)) from None
    if engine is None:
        model = resolve_model(ref, catalog, store)
        label, key = model.label, model.key
    found = [store.get("evaluate", row.key) for row in rows
             if (key is not None and key in row.input_keys.values())
             or (key is None and row.params.get("engine") == ref)]
    found = [a for a in found if a is not None]
    if not found:
        raise StageError(f"no evaluation of {ref!r} in {catalog.path}: run `gymforge eval run --model {ref} ...`")
    return label, found


def compare_models(a: str, b: str, data_dir: str | None = None, html: Path | None = None
                   ) -> tuple[str, str, pl.DataFrame]:
    """B minus A, paired per item, on every suite variant, strategy and width both were evaluated on."""
    root = data_root(data_dir)
    store, catalog = open_store(root), Catalog(root)
    (label_a, found_a), (label_b, found_b) = evaluations_of(a, catalog, store), evaluations_of(b, catalog, store)
    table = compare(load_items(found_a), load_items(found_b))
    if table.is_empty():
        raise StageError(f"{a} and {b} share no evaluated items: evaluate both on the same suites")
    if html is not None:
        build_report({label_a: found_a, label_b: found_b}, html, f"{label_a} vs {label_b}")
    return label_a, label_b, table

"""Stage `noisy_tasks`: the noise curriculum's training tasks, a verified noisy twin of every environment task at each
level 1..L (LongCat-Flash-Thinking-2601 section 3.3.3; the procedure is tasks/noise/twins.py). ``twin_bundles`` runs
the stage on environment bundles on disk (``gymforge noise``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from data_contracts.stage import REJECTED, Artifact, FrameArtifact, StageError, stage
from tasks.noise.records import NOISE_REJECTED, NOISY_TASK
from tasks.noise.twins import NoiseParams, build_twins, noise_success_figure, twins_contract


# 2: a twin that states an internal key is rejected; the contract checks the twins' words; 3: the policy sees
# through tool noise on the identifying read (twins the robust agent solved are kept)
@stage(name="noisy_tasks", version="3", params=NoiseParams, inputs=("environments",),
       outputs={"tasks": twins_contract(NOISY_TASK), REJECTED: NOISE_REJECTED.contract()}, figure=noise_success_figure)
def noisy_tasks(inputs: Mapping[str, Artifact], params: NoiseParams, partition: str) -> dict[str, pl.DataFrame]:
    """Noisy training twins of every environment task at each curriculum level, verified solvable by execution."""
    source = inputs["environments"]
    kept, rejected = build_twins(source.read("environments"), source.read("tasks"), params, "noisy_tasks",
                                 partition, NOISY_TASK)
    return {"tasks": kept, REJECTED: rejected}


def twin_bundles(envs: Path, out: Path, params: NoiseParams) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Noisy twins of every task of the environment bundles under ``envs`` (``gymforge envgen --out``), gated by
    the ``noisy_tasks`` contract, written as bundles under ``out`` with ``rejected.jsonl``, ``summary.json`` and the
    solvability plot (all or nothing); returns (kept twins, rejected, summary per transform and level)."""
    from data_contracts.files import atomic_dir
    from data_contracts.gate import validate
    from envgen.bundle import TASK_JSON_FIELDS, read_bundles, write_task_variant
    from tasks.noise.plot import plot_noise_success
    from tasks.noise.solvability import summary_frame

    kept_all, rejected_all = [], []
    with atomic_dir(out) as tmp:
        for bundle, env, tasks in read_bundles(envs):
            artifact = FrameArtifact({"environments": pl.DataFrame([env]), "tasks": pl.DataFrame(tasks)})
            result = noisy_tasks.run({"environments": artifact}, params, bundle.name)
            for name, contract in noisy_tasks.outputs.items():
                report = validate("noisy_tasks", name, result[name], contract, bundle.name)
                if not report.passed:
                    raise StageError(f"bundle {bundle}: noisy {name} failed its contract: {report}")
            write_task_variant(bundle, tmp / bundle.name, result["tasks"].to_dicts(),
                               (*TASK_JSON_FIELDS, "naive_by_transform"))
            kept_all.append(result["tasks"])
            rejected_all.append(result[REJECTED])
        kept = pl.concat(kept_all, how="diagonal_relaxed")
        rejected = pl.concat(rejected_all, how="diagonal_relaxed")
        rejected.write_ndjson(tmp / "rejected.jsonl")
        summary = summary_frame(kept, rejected)
        (tmp / "summary.json").write_text(json.dumps(summary.to_dicts(), indent=2))
        plot_noise_success(summary, tmp / "noise_success.png")
    return kept, rejected, summary

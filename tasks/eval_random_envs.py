"""Stage `eval_random_envs`: Random Complex Tasks (LongCat-Flash-Thinking-2601 section 5.1): runs of tasks over
held-out domains and freshly renamed variants of the known ones, never trained on."""

from __future__ import annotations

import random
from collections.abc import Mapping

import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import ENVIRONMENT_REJECTED, EVAL_ENVIRONMENT, EVAL_TASK
from data_contracts.stage import REJECTED, Artifact, seed_for, stage
from envgen.checks import environment_contract, task_contract
from envgen.compiler import compile_domain, compiled_domains
from envgen.construct import ConstructionSettings
from envgen.random_tasks import renamed_variant
from envgen.taskgen import TaskSettings, build_verified
from tasks.environments import rejection


class EvalRandomParams(ConstructionSettings, TaskSettings):
    seed: int = Field(1, description="Root seed of the evaluation runs (distinct from training by default).")
    heldout: tuple[str, ...] = Field(("telecom",), description="Domains never trained on, sampled as they are.")
    renamed: tuple[str, ...] = Field((), description="Known domains to rename; empty: every non-held-out domain.")
    runs: int = Field(3, ge=1, le=20, description="Independent runs (the report averages 3).")
    tasks_per_run: int = Field(100, ge=1, le=10_000, description="Tasks per run (the report uses 100).")
    min_domains: int = Field(4, ge=1, description="Distinct domains (or variants) each run must span (report: 4+).")

    @field_validator("heldout", "renamed")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"list the domains once each, got {list(v)}")
        return v


# 2: a repeated fact label reads "second reservation number"; 3: a renamed variant names its customer entity
@stage(name="eval_random_envs", version="3", params=EvalRandomParams, inputs=("domain_graphs",),
       outputs={"environments": environment_contract(EVAL_ENVIRONMENT), "tasks": task_contract(EVAL_TASK),
                REJECTED: ENVIRONMENT_REJECTED.contract()})
def eval_random_envs(inputs: Mapping[str, Artifact], params: EvalRandomParams, partition: str) -> dict[str, pl.DataFrame]:
    """Random Complex Tasks: runs x tasks_per_run tasks over held-out domains and renamed variants."""
    domains = compiled_domains(inputs["domain_graphs"].read("domains"))
    missing = [d for d in params.heldout if d not in domains]
    if missing:
        raise ValueError(f"held-out domains {missing} are not in the domain_graphs input; fix `heldout`")
    renamed = list(params.renamed) or [d for d in domains if d not in params.heldout]
    envs, tasks, rejected = [], [], []
    for run in range(params.runs):
        rng = random.Random(seed_for(params.seed, "eval_random_envs", partition, run))
        # One renamed variant per known domain and run: new names and values each run.
        pool = {d: domains[d] for d in params.heldout}
        pool |= {f"{d}_r{run}": compile_domain(renamed_variant(domains[d].spec, rng, f"r{run}")) for d in renamed}
        names = sorted(pool)
        if len(names) < params.min_domains:
            raise ValueError(f"only {len(names)} domains/variants available, min_domains={params.min_domains}; "
                             "add held-out or renamed domains")
        i = attempts = 0
        while i < params.tasks_per_run and attempts < params.tasks_per_run * 3:
            # The first len(names) draws visit every domain once (the run spans them all); later draws are random.
            name = names[(attempts if attempts < len(names) else rng.randrange(len(names))) % len(names)]
            seed = seed_for(params.seed, "eval_random_envs", f"{partition}/run{run}", attempts)
            env_id = f"rct-{partition}-run{run}-{attempts:05d}-{name}"
            attempts += 1
            env, task, reason = build_verified(pool[name], env_id, seed, params, params)
            if env is None:
                rejected.append(rejection(env_id, name, reason))
                continue
            envs.append({**env, "run": run})
            tasks.append({**task, "run": run})
            i += 1
    return {"environments": EVAL_ENVIRONMENT.frame(envs), "tasks": EVAL_TASK.frame(tasks),
            REJECTED: ENVIRONMENT_REJECTED.frame(rejected)}

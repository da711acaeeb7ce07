"""Environment stages: domain graphs, verified training environments with tasks, Random Complex Tasks.

LongCat-Flash-Thinking-2601 section 3.1.1 (Environment Scaling) and section 5.1 (Random Complex Tasks). The
procedures live in ``envgen`` (spec -> compiler -> construct -> taskgen -> environment); these stages map them over
domains and seeds and declare the contracts, including Python checks that replay every golden trajectory and its
mutations in the environment.

- ``domain_graphs`` (no inputs): one row per shipped domain: its spec, tools, graph, density, executability.
- ``environments`` (input ``domain_graphs``): ``environments`` (each with its verified task as ``task_json``, so
  the row replays on its own), ``tasks``, ``rejected`` (environments or tasks dropped, with the reason).
- ``eval_random_envs`` (input ``domain_graphs``): ``runs`` runs of ``tasks_per_run`` tasks over held-out domains
  and renamed variants of the others.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, seed_for, stage
from envgen.checks import environment_contract, task_contract
from envgen.compiler import compiled_domains
from envgen.construct import ConstructionSettings
from envgen.taskgen import TaskSettings, build_verified
from tasks.environments.records import ENVIRONMENT, ENVIRONMENT_REJECTED
from tasks.records import TASK


class EnvironmentsParams(ConstructionSettings, TaskSettings):
    seed: int = Field(0, description="Root seed; environment i of domain d uses seed_for(seed, stage, partition/d, i).")
    domains: str = Field("all", description="'all' or comma-separated domains of the domain_graphs input to use.")
    heldout: tuple[str, ...] = Field(("telecom",), description="Domains kept out of training (Random Complex Tasks).")
    envs_per_domain: int = Field(4, ge=1, le=100_000, description="Verified environments to keep per domain.")
    max_attempts_factor: int = Field(3, ge=1, le=20,
                                     description="Give up on a domain after envs_per_domain * this many attempts.")



def rejection(env_id: str, domain: str, reason: str) -> dict[str, str]:
    """A rejected row; ``stage_step`` is the reason's prefix from build_verified ('construction' or 'task')."""
    return {"env_id": env_id, "domain": domain, "stage_step": reason.split(":")[0], "reason": reason}


# 2: a repeated fact label reads "second reservation number"; two specs declare their customer entity; 3: one owner
# per record; a task acts for one identified customer, asks customer actions only and states what people know;
# the world's contract (WORLD_CHECKS); 4: a list's wanted row is named by a date or its code before a count, an
# enum value in words ("wrong order")
@stage(name="environments", version="4", params=EnvironmentsParams, inputs=("domain_graphs",),
       outputs={"environments": environment_contract(ENVIRONMENT), "tasks": task_contract(TASK),
                REJECTED: ENVIRONMENT_REJECTED.contract()})
def environments(inputs: Mapping[str, Artifact], params: EnvironmentsParams, partition: str) -> dict[str, pl.DataFrame]:
    """Verified training environments and their tasks, envs_per_domain per non-held-out domain."""
    domains = compiled_domains(inputs["domain_graphs"].read("domains"))
    wanted = list(domains) if params.domains == "all" else [d.strip() for d in params.domains.split(",")]
    unknown = [d for d in wanted if d not in domains]
    if unknown:
        raise ValueError(f"domains {unknown} are not in the domain_graphs input ({sorted(domains)}); fix `domains`")
    envs, tasks, rejected = [], [], []
    for name in wanted:
        if name in params.heldout:
            continue
        kept = 0
        for i in range(params.envs_per_domain * params.max_attempts_factor):
            if kept == params.envs_per_domain:
                break
            seed = seed_for(params.seed, "environments", f"{partition}/{name}", i)
            env_id = f"{name}-{partition}-{i:05d}"
            env, task, reason = build_verified(domains[name], env_id, seed, params, params)
            if env is None:
                rejected.append(rejection(env_id, name, reason))
                continue
            envs.append(env)
            tasks.append(task)
            kept += 1
    return {"environments": ENVIRONMENT.frame(envs), "tasks": TASK.frame(tasks),
            REJECTED: ENVIRONMENT_REJECTED.frame(rejected)}

"""Environment stages: domain graphs, verified training environments with tasks, Random Complex Tasks.

LongCat-Flash-Thinking-2601 section 3.1.1 (Environment Scaling) and section 5.1 (Random Complex Tasks). The
procedures live in ``envgen`` (spec -> compiler -> construct -> taskgen -> runtime); these stages map them over
domains and seeds and declare the contracts, including Python checks that replay every golden trajectory and its
mutations through the runtime.

- ``domain_graphs`` (no inputs): one row per shipped domain: its spec, tools, graph, density, executability.
- ``environments`` (input ``domain_graphs``): ``environments`` (each with its verified task as ``task_json``, so
  the row replays on its own), ``tasks``, ``rejected`` (environments or tasks dropped, with the reason).
- ``eval_random_envs`` (input ``domain_graphs``): ``runs`` runs of ``tasks_per_run`` tasks over held-out domains
  and renamed variants of the others.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from data_contracts.stage import (
    REJECTED,
    REJECTED_CONTRACT,
    Artifact,
    Check,
    Contract,
    Expect,
    Params,
    seed_for,
    stage,
)

ENV_COLUMNS: dict[str, Any] = {
    "env_id": pl.String, "domain": pl.String, "spec_json": pl.String, "spec_hash": pl.String, "seed": pl.Int64,
    "now": pl.String, "tool_names": pl.List(pl.String), "tools": pl.String, "edges": pl.String, "chains": pl.String,
    "fallback_chains": pl.String, "n_tools": pl.Int64, "n_edges": pl.Int64, "density": pl.Float64,
    "n_chains": pl.Int64, "fallback_used": pl.Boolean, "expansion": pl.String, "db": pl.Binary,
    "db_sha256": pl.String, "task_json": pl.String,
}
TASK_COLUMNS: dict[str, Any] = {
    "task_id": pl.String, "env_id": pl.String, "domain": pl.String, "system_prompt": pl.String,
    "description": pl.String, "user_profile": pl.String, "rubric": pl.String, "golden_actions": pl.String,
    "difficulty": pl.String, "noise": pl.String,
}
DOMAIN_COLUMNS: dict[str, Any] = {
    "domain": pl.String, "spec_json": pl.String, "spec_hash": pl.String, "n_entities": pl.Int64,
    "n_tools": pl.Int64, "n_read_tools": pl.Int64, "n_write_tools": pl.Int64, "tools": pl.String,
    "read_write_map": pl.String, "edges": pl.String, "n_edges": pl.Int64, "density": pl.Float64,
    "executability": pl.Float64, "failed_tools": pl.List(pl.String),
}
REJECT_COLUMNS: dict[str, Any] = {"env_id": pl.String, "domain": pl.String, "stage_step": pl.String, "reason": pl.String}
MIN_TOOLS = 20  # the report's fallback floor: at least 20 tools per environment


# -- params ------------------------------------------------------------------------------------------------------
class DomainGraphsParams(Params):
    domains: str = Field("all", description="'all' or a comma-separated list of shipped domain names.")
    seed: int = Field(0, description="Seed of the database the executability check runs every tool against.")
    min_tools: int = Field(60, description="Each domain must compile to at least this many tools (report: 60+).")

    def local_inputs(self) -> list[str]:
        """The spec files of the selected domains: editing a spec rebuilds its graphs."""
        from envgen.spec import domain_paths, resolve_domains

        paths = domain_paths()
        return [str(paths[name]) for name in resolve_domains(self.domains)]


class ConstructionParams(Params):
    seed: int = Field(0, description="Root seed; environment i of domain d uses seed_for(seed, stage, partition/d, i).")
    max_reads: int = Field(3, ge=0, le=8, description="Most read tools before the write in a sampled chain.")
    max_chains: int = Field(3, ge=1, le=8, description="Most seed chains per environment (multi-chain growth).")
    solver_attempts: int = Field(8, ge=1, le=64, description="Budget of the solver whose attempt count is g(D).")
    tau: float = Field(0.3, ge=0.0, lt=1.0, description="Threshold: a chain is added only while p = f(c, g, |D|) > tau.")
    min_tools: int = Field(MIN_TOOLS, ge=1, description="Fallback floor on tools per environment (report: 20).")
    inline_fact_prob: float = Field(0.5, ge=0.0, le=1.0,
                                    description="Chance a profile fact is also written in the task text.")

    def settings(self):
        from envgen.construct import ConstructionSettings

        return ConstructionSettings(self.max_reads, self.max_chains, self.solver_attempts, self.tau, self.min_tools)


class EnvironmentsParams(ConstructionParams):
    domains: str = Field("all", description="'all' or comma-separated domains of the domain_graphs input to use.")
    heldout: tuple[str, ...] = Field(("telecom",), description="Domains kept out of training (Random Complex Tasks).")
    envs_per_domain: int = Field(4, ge=1, le=100_000, description="Verified environments to keep per domain.")
    max_attempts_factor: int = Field(3, ge=1, le=20,
                                     description="Give up on a domain after envs_per_domain * this many attempts.")


class EvalRandomParams(ConstructionParams):
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


# -- checks that replay --------------------------------------------------------------------------------------------
def _replays(frame: pl.DataFrame) -> list[bool]:
    """True where the environment's golden trajectory does NOT replay to reward 1 through the runtime."""
    from envgen.runtime import Environment, replay

    bad = []
    for row in frame.iter_rows(named=True):
        env = Environment(row)
        bad.append(replay(env, json.loads(row["task_json"])).reward != 1.0)
        env.close()
    return bad


def _mutations_pass(frame: pl.DataFrame) -> list[bool]:
    """True where some mutated trajectory (drop-write, wrong-arg, wrong-row, extra-write) does NOT score 0."""
    from envgen.runtime import Environment, domain_for, replay
    from envgen.taskgen import MUTATIONS, mutate

    bad = []
    for row in frame.iter_rows(named=True):
        env, task, domain = Environment(row), json.loads(row["task_json"]), domain_for(row)
        rng = random.Random(row["seed"])
        scores = [replay(env, task, m).reward if (m := mutate(domain, row, task, k, rng)) is not None else 1.0
                  for k in MUTATIONS]
        bad.append(any(s != 0.0 for s in scores))
        env.close()
    return bad


def _too_few_tools(frame: pl.DataFrame) -> pl.Series:
    return frame["n_tools"] < MIN_TOOLS


def _task_ids_match(frame: pl.DataFrame) -> list[bool]:
    return [json.loads(r["task_json"])["env_id"] != r["env_id"] for r in frame.iter_rows(named=True)]


ENV_CONTRACT = Contract(
    columns=ENV_COLUMNS,
    expectations=(
        Expect("ExpectColumnValuesToBeUnique", column="env_id"),
        Expect("ExpectColumnValuesToBeUnique", column="db_sha256", severity="warning"),
        Expect("ExpectColumnValuesToBeBetween", column="density", min_value=0.0, max_value=1.0),
        Expect("ExpectColumnValuesToNotBeNull", column="db"),
    ),
    checks=(
        Check("min_tools", _too_few_tools, description=f"every environment has at least {MIN_TOOLS} tools"),
        Check("task_belongs_to_env", _task_ids_match, description="task_json names this environment"),
        Check("golden_replays", _replays, description="the golden trajectory replays with reward 1"),
        Check("mutations_score_zero", _mutations_pass, description="each mutated trajectory scores 0"),
    ),
)
TASK_CONTRACT = Contract(
    columns=TASK_COLUMNS,
    expectations=(
        Expect("ExpectColumnValuesToBeUnique", column="task_id"),
        Expect("ExpectColumnValuesToNotBeNull", column="env_id"),
        Expect("ExpectColumnValueLengthsToBeBetween", column="description", min_value=10),
    ),
)
DOMAIN_CONTRACT = Contract(
    columns=DOMAIN_COLUMNS,
    expectations=(
        Expect("ExpectColumnValuesToBeUnique", column="domain"),
        Expect("ExpectColumnValuesToBeBetween", column="executability", min_value=1.0, max_value=1.0),
        Expect("ExpectColumnValuesToBeBetween", column="n_tools", min_value=60),
    ),
    min_rows=1,
)
ENV_REJECTED_CONTRACT = Contract(columns={**REJECTED_CONTRACT.columns, **REJECT_COLUMNS})


# -- stages ------------------------------------------------------------------------------------------------------
@stage(name="domain_graphs", version="2", params=DomainGraphsParams, outputs={"domains": DOMAIN_CONTRACT})
def domain_graphs(inputs: Mapping[str, Artifact], params: DomainGraphsParams, partition: str) -> dict[str, pl.DataFrame]:
    """Compile every selected domain spec; execute every tool on a seeded database."""
    from envgen.compiler import compile_domain
    from envgen.construct import executability
    from envgen.spec import load_domain, resolve_domains

    rows = []
    for name in resolve_domains(params.domains):
        domain = compile_domain(load_domain(name))
        if len(domain.tools) < params.min_tools:
            raise ValueError(f"domain {name!r} compiles to {len(domain.tools)} tools, below min_tools="
                             f"{params.min_tools}; add entities, relations or actions to its spec")
        rate, failed = executability(domain, seed_for(params.seed, "domain_graphs", partition, 0))
        writes = domain.writes()
        rows.append({
            "domain": name, "spec_json": domain.spec.model_dump_json(), "spec_hash": domain.spec.spec_hash,
            "n_entities": len(domain.spec.entities), "n_tools": len(domain.tools),
            "n_read_tools": len(domain.tools) - len(writes), "n_write_tools": len(writes),
            "tools": json.dumps(domain.schemas()), "read_write_map": json.dumps(domain.read_write_map()),
            "edges": json.dumps(sorted([u, v] for u, v in domain.graph.edges)),
            "n_edges": domain.graph.number_of_edges(), "density": round(domain.density, 6),
            "executability": rate, "failed_tools": failed,
        })
    return {"domains": pl.DataFrame(rows, schema=DOMAIN_COLUMNS)}


def build_one(domain, env_id: str, seed: int, params: ConstructionParams) -> tuple[dict | None, dict | None, str]:
    """(environment record, task record, '') or (None, None, reason)."""
    from envgen.taskgen import TaskSettings, build_verified

    return build_verified(domain, env_id, seed, params.settings(), TaskSettings(params.inline_fact_prob))


def _rejection(env_id: str, domain: str, reason: str) -> dict[str, str]:
    """A rejected row; ``stage_step`` is the reason's prefix from build_one ('construction' or 'task')."""
    return {"env_id": env_id, "domain": domain, "stage_step": reason.split(":")[0], "reason": reason}


def _frames(envs: list[dict], tasks: list[dict], rejected: list[dict], extra: dict[str, Any] | None = None):
    extra = extra or {}
    return {
        "environments": pl.DataFrame(envs, schema={**ENV_COLUMNS, **extra}),
        "tasks": pl.DataFrame(tasks, schema={**TASK_COLUMNS, **extra}),
        REJECTED: pl.DataFrame(rejected, schema=REJECT_COLUMNS),
    }


def _domains_from(inputs: Mapping[str, Artifact]) -> dict[str, Any]:
    from envgen.compiler import compile_domain
    from envgen.spec import DomainSpec

    frame = inputs["domain_graphs"].read("domains")
    return {r["domain"]: compile_domain(DomainSpec.model_validate_json(r["spec_json"])) for r in frame.iter_rows(named=True)}


@stage(name="environments", version="1", params=EnvironmentsParams, inputs=("domain_graphs",),
       outputs={"environments": ENV_CONTRACT, "tasks": TASK_CONTRACT, REJECTED: ENV_REJECTED_CONTRACT})
def environments(inputs: Mapping[str, Artifact], params: EnvironmentsParams, partition: str) -> dict[str, pl.DataFrame]:
    """Verified training environments and their tasks, envs_per_domain per non-held-out domain."""
    domains = _domains_from(inputs)
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
            env, task, reason = build_one(domains[name], env_id, seed, params)
            if env is None:
                rejected.append(_rejection(env_id, name, reason))
                continue
            envs.append(env)
            tasks.append(task)
            kept += 1
    return _frames(envs, tasks, rejected)


@stage(name="eval_random_envs", version="1", params=EvalRandomParams, inputs=("domain_graphs",),
       outputs={"environments": Contract(columns={**ENV_COLUMNS, "run": pl.Int64}, checks=ENV_CONTRACT.checks,
                                         expectations=ENV_CONTRACT.expectations),
                "tasks": Contract(columns={**TASK_COLUMNS, "run": pl.Int64}, expectations=TASK_CONTRACT.expectations),
                REJECTED: ENV_REJECTED_CONTRACT})
def eval_random_envs(inputs: Mapping[str, Artifact], params: EvalRandomParams, partition: str) -> dict[str, pl.DataFrame]:
    """Random Complex Tasks: runs x tasks_per_run tasks over held-out domains and renamed variants."""
    from envgen.compiler import compile_domain
    from envgen.random_tasks import renamed_variant

    domains = _domains_from(inputs)
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
            env, task, reason = build_one(pool[name], env_id, seed, params)
            if env is None:
                rejected.append(_rejection(env_id, name, reason))
                continue
            envs.append({**env, "run": run})
            tasks.append({**task, "run": run})
            i += 1
    return _frames(envs, tasks, rejected, {"run": pl.Int64})

"""Checks that execute what they check: the contracts of environment and task outputs (the record's rules plus
Python checks that run every row through the runtime: the golden trajectory replays to reward 1, each mutation of
it scores 0, which GX cannot say), and the check of a domain spec file a spec author runs."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data_contracts.schemas import Record, between, min_length, unique
from data_contracts.stage import Check, Contract
from envgen.compiler import CompileError, compile_domain
from envgen.construct import MIN_DOMAIN_TOOLS, MIN_TOOLS, executability
from envgen.runtime import Environment, domain_for, replay
from envgen.spec import SpecError, load_spec
from envgen.taskgen import MUTATIONS, build_verified, mutate


def golden_fails(frame: pl.DataFrame) -> list[bool]:
    """True where the environment's golden trajectory does NOT replay to reward 1 through the runtime."""
    bad = []
    for row in frame.iter_rows(named=True):
        env = Environment(row)
        bad.append(replay(env, json.loads(row["task_json"])).reward != 1.0)
        env.close()
    return bad


def mutation_passes(frame: pl.DataFrame) -> list[bool]:
    """True where some mutated trajectory (drop-write, wrong-arg, wrong-row, extra-write) does NOT score 0."""
    bad = []
    for row in frame.iter_rows(named=True):
        env, task, domain = Environment(row), json.loads(row["task_json"]), domain_for(row)
        rng = random.Random(row["seed"])
        scores = [replay(env, task, m).reward if (m := mutate(domain, row, task, k, rng)) is not None else 1.0
                  for k in MUTATIONS]
        bad.append(any(s != 0.0 for s in scores))
        env.close()
    return bad


def _task_of_another_env(frame: pl.DataFrame) -> list[bool]:
    return [json.loads(r["task_json"])["env_id"] != r["env_id"] for r in frame.iter_rows(named=True)]


def environment_contract(record: Record) -> Contract:
    return record.contract(
        expectations=(unique("db_sha256", severity="warning"), between("density", 0.0, 1.0)),
        checks=(
            Check("min_tools", lambda f: f["n_tools"] < MIN_TOOLS,
                  description=f"every environment has at least {MIN_TOOLS} tools"),
            Check("task_belongs_to_env", _task_of_another_env, description="task_json names this environment"),
            Check("golden_replays", golden_fails, description="the golden trajectory replays with reward 1"),
            Check("mutations_score_zero", mutation_passes, description="each mutated trajectory scores 0"),
        ),
    )


def task_contract(record: Record) -> Contract:
    return record.contract(expectations=(min_length("description", 10),))



@dataclass(frozen=True)
class SpecCheck:
    """What ``gymforge envgen check`` reports of one spec file."""

    domain: str
    tools: int
    executability: float
    kept: int
    problems: list[str]


def check_spec(path: Path, envs: int) -> SpecCheck:
    """A spec checked the way the stages use it: parsed (every problem listed), compiled (enough tools), every tool
    executed, then ``envs`` environments constructed and verified (golden replay and four mutations)."""
    try:
        domain = compile_domain(load_spec(path))
    except SpecError as exc:
        return SpecCheck(path.stem, 0, 0.0, 0, list(exc.problems))
    except (CompileError, OSError) as exc:
        return SpecCheck(path.stem, 0, 0.0, 0, [str(exc)])
    rate, broken = executability(domain, 0)
    problems = [f"tool {tool} failed to execute on a seeded database" for tool in broken]
    if domain.spec.customer_entity is None:
        problems.append("no customer entity: mid-training tasks act for one customer; declare `customer: ENTITY` "
                        "(none or several entities have an email field)")
    if len(domain.tools) < MIN_DOMAIN_TOOLS:
        problems.append(f"only {len(domain.tools)} tools; add entities, relations or actions "
                        f"({MIN_DOMAIN_TOOLS}+ needed)")
    kept = 0
    for seed in range(envs):
        env, _, reason = build_verified(domain, f"{domain.name}-{seed}", seed)
        kept += env is not None
        problems += [reason] if reason else []
    return SpecCheck(domain.name, len(domain.tools), rate, kept, problems)

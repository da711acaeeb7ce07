"""Shared fixtures of the mid-training tests: a few small verified environments of different domains, and the
environment-grounded trajectories built on them."""

from __future__ import annotations

from functools import cache
from typing import Any

import polars as pl

from data_contracts.stage import FrameArtifact

DOMAINS = ("airline", "retail", "bank", "car_rental")


@cache
def environments() -> list[dict[str, Any]]:
    """One verified environment per domain (small: a chain or two), with its task, that offers a tool to identify
    the customer (mid-training tasks act for one)."""
    from envgen.compiler import compile_domain
    from envgen.construct import ConstructionSettings
    from envgen.domain_spec import load_domain
    from envgen.taskgen import TaskSettings, build_verified
    from tasks.midtrain.synth import identifying_tool

    envs = []
    for name in DOMAINS:
        domain = compile_domain(load_domain(name))
        for seed in range(20):
            env, _, _ = build_verified(domain, f"{name}-t-{seed:05d}", seed,
                                       ConstructionSettings(min_tools=8, max_chains=2), TaskSettings())
            if env is not None and identifying_tool(domain, set(env["tool_names"])) is not None:
                envs.append(env)
                break
    return envs


def environments_artifact() -> FrameArtifact:
    from tasks.environments.records import ENVIRONMENT

    return FrameArtifact({"environments": ENVIRONMENT.frame(environments())})


@cache
def env_trajectories(n_tasks: int = 8) -> pl.DataFrame:
    """midtrain_env's trajectories on the fixture environments (reference teacher); every restated variant holds a
    failed try where one fits, so selections of a few rows still carry masked turns."""
    from longctx_fixtures import tokenizer_artifact

    import tasks.midtrain.midtrain_env as stage

    inputs = {"environments": environments_artifact(), "tokenizer": tokenizer_artifact()}
    out = stage.midtrain_env.run(inputs, stage.midtrain_env.parse_params({"n_tasks": n_tasks, "retry_prob": 1.0}), "t")
    return out["trajectories"]

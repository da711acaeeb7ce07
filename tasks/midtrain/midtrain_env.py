"""Stage `midtrain_env`: environment-grounded mid-training trajectories (LongCat-Flash-Thinking-2601 section 2,
"Environment-grounded synthesis"; the procedure is ``tasks.midtrain.synth``).

For item i an environment of the `environments` artifact (domains taken in turn) gets new tool chains sampled from
its own dependency graph (1..max_chains chains of 1..max_reads reads), grounded on a copy of its database, with the
request and profile reverse-synthesized so every argument is derivable; the reference agent plays it in the
environment with the profile-grounded user, reasoning before each call. ``variants_per_task`` conversations are played
per task (one by default: more base tasks at a given count), each with its own choice of what the user states up
front (the rest is asked for) and, with ``retry_prob``, a mistyped first call that fails and is recovered (a masked
turn). With
``refusal_share`` a task also gets a refusal: its customer asks to change another customer's record, and the agent
identifies them, checks the record and refuses. A teacher may write the texts; every kept conversation re-verifies
by execution.

With ``bundles`` (a local directory of environment bundles, ``gymforge envgen --out``) the environments come from
there instead of the `environments` artifact; a bundle that cannot be run (a missing or broken file, a database that
is not SQLite, a spec that does not compile, a tool the spec lacks) is one error naming it, before any item.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, StageError, rng_for, stage
from envgen.environment import domain_for
from envgen.records import TRAJECTORY
from envgen.taskgen import TaskSettings
from envgen.trajectory_standard import VARIED_SENTENCES
from tasks.midtrain.synth import (
    ENV_FIELDS,
    ReferenceEpisode,
    Unusable,
    refusal_episode,
    restate,
    retry_candidates,
    sample_task,
)
from tasks.midtrain.trajectory_stages import (
    EVAL_ENV_PREFIX,
    EpisodeParams,
    episode_rows,
    open_teacher,
    token_counter,
    trajectory_contract,
)
from tasks.records import ITEM_REJECTED

STAGE = "midtrain_env"


class MidtrainEnvParams(EpisodeParams, TaskSettings):
    n_tasks: int = Field(64, ge=0, description="tasks synthesized (each played variants_per_task times)")
    variants_per_task: int = Field(1, ge=1, le=16, description="conversations played per task, each with its own "
                                   "choice of what the user states up front and an optional failed try (more base "
                                   "tasks teach more than more variants of one)")
    task_attempts: int = Field(4, ge=1, le=32, description="samples per task (on the next environment each time) "
                               "before it is rejected")
    max_chains: int = Field(2, ge=1, le=6, description="most chains (sub-goals) per task")
    max_reads: int = Field(3, ge=1, le=8, description="most read tools before each chain's write (its depth)")
    stated_share: float = Field(0.5, ge=0.0, le=1.0, description="in a variant, the chance each fact the user may "
                                "state up front is stated (else the agent asks for it)")
    retry_prob: float = Field(0.3, ge=0.0, le=1.0, description="chance a variant holds a mistyped call that fails "
                              "and is recovered (trained around, its turn masked)")
    refusal_share: float = Field(0.25, ge=0.0, le=1.0, description="chance a task also gets a refusal variant: "
                                 "the customer asks to change another customer's record, the agent checks and "
                                 "refuses")
    check_mutations: bool = Field(False, description="also require the four mutated trajectories of each task to "
                                  "score 0 (the RL task check; about 4x slower)")
    bundles: str | None = Field(None, description="a local directory of environment bundles (gymforge envgen "
                                "--out) to synthesize on instead of the environments artifact")

    def local_inputs(self) -> list[str]:
        return super().local_inputs() + ([self.bundles] if self.bundles else [])


def bundle_environments(root: str | Path) -> list[dict[str, Any]]:
    """The environment records of the bundles under ``root``, each checked to be runnable; StageError naming the
    bundle and what is wrong otherwise."""
    from envgen.bundle import BundleError, bundle_dirs, read_bundle

    envs = []
    try:
        for path in bundle_dirs(Path(root)):
            env, _ = read_bundle(path)
            if (problem := _unrunnable(env)) is not None:
                raise BundleError(f"bundle {path}: {problem}")
            envs.append(env)
    except (BundleError, OSError) as exc:
        raise StageError(f"midtrain_env: {exc}") from None
    return envs


def _unrunnable(env: dict[str, Any]) -> str | None:
    from pydantic import ValidationError

    missing = [f for f in ENV_FIELDS if f not in env]
    if missing:
        return f"env.json lacks {', '.join(missing)}"
    if not bytes(env["db"]).startswith(b"SQLite format 3\x00"):
        return "db.sqlite is not a SQLite database"
    try:
        domain = domain_for(env)
    except (ValidationError, ValueError, KeyError) as exc:
        return f"env.json's spec_json is not a valid domain spec ({str(exc).splitlines()[0]})"
    unknown = sorted(set(env["tool_names"]) - set(domain.tools))
    return f"tool_names {unknown} are not tools of domain {domain.spec.name!r}" if unknown else None


def plan_items(envs: list[dict], params: MidtrainEnvParams, partition: str) -> tuple[list, list[dict[str, str]]]:
    """The episodes to play: (id, episode, row fields) per conversation, and the tasks that could not be
    synthesized. Task i is sampled on environment i (then the next ones) up to ``task_attempts`` times, so a task
    that cannot be synthesized on one environment costs no base task; each of its conversations draws what the user
    states up front and, with ``retry_prob``, a failed try."""
    items, rejected = [], []
    for i in range(params.n_tasks if envs else 0):
        rng = rng_for(params.seed, STAGE, partition, i)
        task_id = f"{STAGE}:{partition}:{i:06d}"
        reasons = []
        for attempt in range(params.task_attempts):
            try:
                episode = sample_task(envs[(i + attempt) % len(envs)], rng, params.max_chains, params.max_reads,
                                      params, f"m{i}", params.check_mutations)
                break
            except Unusable as exc:
                reasons.append(str(exc))
        else:
            rejected.append({"id": task_id, "reason": f"not_verified: {reasons[-1]}"})
            continue
        retries = retry_candidates(domain_for(episode.env), episode.calls)
        for v in range(params.variants_per_task):
            retry = frozenset(rng.sample(retries, 1)) if retries and rng.random() < params.retry_prob else frozenset()
            variant = ReferenceEpisode(episode.env, restate(episode.task, rng, params.stated_share), episode.calls,
                              retries=retry)
            settings = {"variant": v, "calls": len(episode.calls), "retries": sorted(variant.retries)}
            items.append((f"{task_id}/{v}", variant, {"rng": rng, "transform_settings": settings}))
        if rng.random() < params.refusal_share:
            try:
                refusal = refusal_episode(episode, rng)
            except Unusable as exc:
                rejected.append({"id": f"{task_id}/refusal", "reason": f"not_applicable: {exc}"})
                continue
            settings = {"variant": "refusal", "calls": len(refusal.calls), "retries": []}
            items.append((f"{task_id}/refusal", refusal, {"rng": rng, "transform_settings": settings}))
    return items, rejected


# 2: compact tool schemas and results; one acting customer per task, identified first; no read without a
# reason; reasons, alternatives and the outcome stated in words that are true
# 3: the trajectory standard; finals rendered from what the writes did; the user's and agent's words varied
# 4: a purpose names no fee (a refusal states only amounts the database holds)
@stage(name=STAGE, version="4", params=MidtrainEnvParams, inputs=("environments", "tokenizer"),
       outputs={"trajectories": trajectory_contract([STAGE], checks=(VARIED_SENTENCES,)), REJECTED: ITEM_REJECTED.contract()})
def midtrain_env(inputs: Mapping[str, Artifact], params: MidtrainEnvParams, partition: str) -> dict[str, pl.DataFrame]:
    """Verified environment-grounded trajectories: sampled chains, reverse-synthesized requests, played and kept
    only when the final database state passes the rubric."""
    every = (bundle_environments(params.bundles) if params.bundles
             else inputs["environments"].read("environments").to_dicts())
    envs = sorted((e for e in every if e["domain"] not in params.heldout and not e["env_id"].startswith(EVAL_ENV_PREFIX)),
                  key=lambda e: (e["env_id"].rsplit("-", 1)[-1], e["domain"]))
    items, rejected = plan_items(envs, params, partition)
    teacher = open_teacher(params)
    try:
        rows, failed = episode_rows(items, params, STAGE, token_counter(params, inputs), teacher)
    finally:
        teacher.close()
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected + failed)}

"""What the trajectory stages share (midtrain_env, the augmentations, midtrain_text, midtrain_longctx, sft_set): the
contract every output of the `trajectory` record obeys, token counting with the project tokenizer, and how a
trajectory row is put together.

The contract is the trajectory standard every trajectory stage holds to (``envgen.trajectory_standard``: each row
re-verifies by its verifier, acts for one identified customer, grounds its arguments, reads nothing it knows, states
a true outcome, ...), plus what only the routes know: no row comes from an evaluation environment or a held-out
domain, and tokens are within the window the row was held to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from data_contracts.stage import Artifact, Check, Params
from envgen.environment import json_field
from envgen.records import TRAJECTORY
from envgen.small import DISTRACTORS
from envgen.trajectory_checks import ANSWER, turn_mask, verify_answer
from envgen.trajectory_standard import habit_problem, standard_contract

EVAL_ENV_PREFIX = "rct-"
"""Environment ids of Random Complex Tasks (``eval_random_envs``): never trained on."""


class TrajectoryParams(Params):
    """Params every trajectory-synthesis stage takes."""

    seed: int = Field(0, description="root seed; item i draws from rng_for(seed, stage, partition, i)")
    teacher: str = Field("reference", description="who writes the texts: 'reference' (the offline reference teacher, "
                         "texts written from the graph and specs) or an engine spec openai:URL#MODEL, hf:DIR, vllm:DIR")
    max_tokens: int = Field(16384, ge=64, description="longest chat-templated trajectory kept (project tokenizer)")
    heldout: tuple[str, ...] = Field(("telecom",), description="domains never trained on (Random Complex Tasks)")
    tokenizer: str = Field("default", description="'default' = the tokenizer artifact, or a local tokenizer dir")

    @field_validator("teacher")
    @classmethod
    def _teacher(cls, value: str) -> str:
        from inference.teacher import check_teacher

        return check_teacher(value)

    def local_inputs(self) -> list[str]:
        from inference.engine_spec import REFERENCE, EngineSpec

        teacher = [] if self.teacher == REFERENCE else EngineSpec.parse(self.teacher).local_inputs()
        return teacher + ([] if self.tokenizer == "default" else [self.tokenizer])

    def limits(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "heldout": list(self.heldout)}


class EpisodeParams(TrajectoryParams):
    """Params of the routes that play environment episodes (midtrain_env and its augmentations)."""

    distractor_tools: int = Field(DISTRACTORS, ge=-1, description="tools offered beside the called ones, graph "
                                  "neighbours first, in compact schemas (envgen.small.task_tools); -1: all")


def open_teacher(params: TrajectoryParams) -> Any:
    from inference.teacher import Teacher

    return Teacher(params.teacher, seed=params.seed)


def token_counter(params: TrajectoryParams, inputs: Mapping[str, Artifact]) -> Any:
    """``count(messages, tools) -> int``: the chat-templated conversation's length with the project tokenizer."""
    from tasks.tokenizer import resolve_tokenizer

    tok = resolve_tokenizer(params.tokenizer, inputs)

    def count(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> int:
        text = tok.apply_chat_template([dict(m) for m in messages], tools=list(tools) or None, tokenize=False)
        return len(tok.encode(text, add_special_tokens=False))

    return count


def make_row(*, id: str, source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], verifier: str,
             verify_input: dict[str, Any], tokens: int, domain: str | None = None, env_id: str | None = None,
             task_id: str | None = None, seed_id: str | None = None, env_db: bytes | None = None,
             parent_id: str | None = None, transform: str | None = None,
             transform_settings: Any = None) -> dict[str, Any]:
    """A `trajectory` row, its turn-level mask computed from the conversation."""
    return {
        "id": id, "source": source, "env_id": env_id, "task_id": task_id, "seed_id": seed_id, "domain": domain,
        "messages": json.dumps(messages), "tools": json.dumps(tools), "train": turn_mask(messages, tools),
        "verified": True, "verifier": verifier, "parent_id": parent_id, "transform": transform,
        "transform_settings": None if transform_settings is None else json.dumps(transform_settings),
        "tokens": tokens, "verify_input": json.dumps(verify_input), "env_db": env_db,
    }


def too_long(tokens: int, params: TrajectoryParams) -> str | None:
    return f"too_long: {tokens} tokens > max_tokens={params.max_tokens}" if tokens > params.max_tokens else None


def answer_row(*, id: str, source: str, messages: list[dict[str, Any]], verify_input: dict[str, Any],
               params: TrajectoryParams, count: Any, **fields: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(row, None) for a tool-free conversation whose answer verifies (verifier ``answer``: the two-way reward and
    every condition stated) within the token window; else (None, the reason it is rejected)."""
    tokens = count(messages, [])
    failed = verify_answer(messages, verify_input)
    reason = f"not_verified: {failed}" if failed else too_long(tokens, params)
    if reason:
        return None, reason
    return make_row(id=id, source=source, messages=messages, tools=[], verifier=ANSWER, verify_input=verify_input,
                    tokens=tokens, **fields), None


# --- the contract -------------------------------------------------------------------------------------------


def _not_allowed(frame: pl.DataFrame) -> list[bool]:
    bad = []
    for r in frame.iter_rows(named=True):
        limits = (json_field(r["verify_input"]) or {}).get("limits") or {}
        bad.append(str(r["env_id"] or "").startswith(EVAL_ENV_PREFIX) or not limits
                   or r["domain"] in limits.get("heldout", ()) or r["tokens"] > limits.get("max_tokens", 0))
    return bad


WITHIN_LIMITS = Check("within_limits", _not_allowed,
                      description="no evaluation environment or held-out domain; tokens within the row's window")


def trajectory_contract(sources: Sequence[str], min_rows: int = 0, checks: Sequence[Check] = ()) -> Any:
    """The contract of every route's output: the trajectory standard (``envgen.trajectory_standard``), the
    route's window and held-out domains, then ``checks`` (a route's own)."""
    return standard_contract(sources, min_rows, (WITHIN_LIMITS, *checks))


# --- environment episodes -> rows ----------------------------------------------------------------------------


def episode_rows(items: Sequence[tuple[str, Any, dict[str, Any]]], params: EpisodeParams, source: str,
                 count: Any, teacher: Any) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Play each ``(id, episode, fields)`` (``tasks.midtrain.synth``), let the teacher write its texts, and keep it
    only if the final conversation re-verifies by execution and fits the window; ``fields`` go into the row
    (parent_id, transform, transform_settings). Returns (rows, rejected {id, reason})."""
    from envgen.trajectory_checks import EXECUTION, apply_texts, verify_execution
    from tasks.midtrain.synth import ENV_FIELDS, Unusable, play

    played, rejected = [], []
    for item_id, episode, fields in items:
        if episode.env["domain"] in params.heldout or str(episode.env["env_id"]).startswith(EVAL_ENV_PREFIX):
            rejected.append({"id": item_id, "reason": f"heldout: domain {episode.env['domain']}"})
            continue
        try:
            played.append((item_id, episode, fields, play(episode, fields.pop("rng"), params.distractor_tools)))
        except Unusable as exc:
            rejected.append({"id": item_id, "reason": f"not_verified: {exc}"})
    texts = teacher.write_all([p.slots for *_, p in played])
    rows = []
    for (item_id, episode, fields, p), written in zip(played, texts, strict=True):
        if isinstance(written, str):
            rejected.append({"id": item_id, "reason": written})
            continue
        messages = apply_texts(p.messages, p.slots, written)
        verify_input = {"env": {k: episode.env[k] for k in ENV_FIELDS}, "task": episode.task,
                        "limits": params.limits(), "teacher": teacher.name}
        tokens = count(messages, p.tools)
        failed = verify_execution(messages, verify_input, bytes(episode.env["db"]))
        reason = f"not_verified: {failed}" if failed else too_long(tokens, params)
        if reason:
            rejected.append({"id": item_id, "reason": reason})
            continue
        row = make_row(
            id=item_id, source=source, messages=messages, tools=p.tools, verifier=EXECUTION,
            verify_input=verify_input, tokens=tokens, domain=episode.env["domain"], env_id=episode.env["env_id"],
            task_id=episode.task["task_id"], env_db=bytes(episode.env["db"]), **fields)
        # A row that breaks a habit of the standard (a restated variant can state up front what a read was played
        # to find: 6 of 3,811 rows at n_tasks 3000) would have the contract quarantine the whole output; it is set
        # aside here with the check it fails.
        if (problem := habit_problem(row)) is not None:
            rejected.append({"id": item_id, "reason": problem})
            continue
        rows.append(row)
    return rows, rejected


def augment(parents: pl.DataFrame, params: EpisodeParams, partition: str, stage: str, transform: str,
            fn: Any, inputs: Mapping[str, Artifact]) -> dict[str, pl.DataFrame]:
    """An augmentation stage: ``fn(episode, rng) -> (episode, settings)`` on every verified parent episode; the
    augmented episodes are played, written and verified like originals, with the parent and settings recorded."""
    from data_contracts.stage import REJECTED, rng_for
    from tasks.midtrain.synth import Unusable, episode_of
    from tasks.records import ITEM_REJECTED

    items, rejected = [], []
    for i, row in enumerate(parents.filter(pl.col("verifier") == "execution").iter_rows(named=True)):
        rng = rng_for(params.seed, stage, partition, i)
        item_id = f"{transform}:{row['id']}"
        try:
            episode, settings = fn(episode_of(row), rng)
        except Unusable as exc:
            rejected.append({"id": item_id, "reason": f"not_applicable: {exc}"})
            continue
        items.append((item_id, episode, {"rng": rng, "parent_id": row["id"], "transform": transform,
                                         "transform_settings": settings}))
    teacher = open_teacher(params)
    try:
        rows, failed = episode_rows(items, params, transform, token_counter(params, inputs), teacher)
    finally:
        teacher.close()
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected + failed)}

"""Exports of an artifact's rows for other trainers (``gymforge export``): TRL's GRPOTrainer (``trl``: prompts as
chat messages, the other columns as reward-function keyword arguments), its SFTTrainer (``sft``: a trajectory
artifact as messages with their per-turn ``train`` flags, and tools), or every column as JSON lines (``jsonl``).
Environment tasks (a stage whose ``tasks`` rows name an ``env_id``: environments, small_envs, noisy_tasks,
eval_random_envs) export as episodes to start (``inference.environments.exports``): for TRL's
``environment_factory`` (``trl``), and as verl's and SkyRL's RL parquet (``verl``, ``skyrl``; these two are for
environment tasks and the rl_mix prompts only).

The rows come from a parquet file, an artifact directory, or a stage's output as the profile makes it: read from
the store when published (no Prefect server, cluster or flow run: an export takes about a second), else
materialized through the store first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import polars as pl

from data_contracts.files import write_frame
from data_contracts.stage import StageError
from envgen.small import DISTRACTORS

Format = Literal["trl", "sft", "jsonl", "verl", "skyrl"]
FORMATS: tuple[Format, ...] = ("trl", "sft", "jsonl", "verl", "skyrl")
RL_PARQUET: tuple[Format, ...] = ("verl", "skyrl")
MESSAGE_COLUMNS = ("prompt",)  # JSON-string chat messages in the artifacts, lists of messages in an export
JSON_COLUMNS = ("distractor_chains",)


def trl_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """Prompt columns as lists of ``{role, content}`` messages: what ``datasets`` loads and GRPOTrainer reads as a
    conversational prompt; the other columns reach the reward functions as keyword arguments. An artifact without
    a prompt gets the one rl_mix gives the same item: a QA seed (question, docs) on its own documents, a math
    problem (question) on its own."""
    from tasks.longctx.rl_mix import question_prompt, seed_prompt

    if "prompt" not in frame.columns:
        if {"question", "docs"} <= set(frame.columns):
            prompts = [seed_prompt(q, d) for q, d in frame.select("question", "docs").iter_rows()]
        elif "question" in frame.columns:
            prompts = [question_prompt(q) for q in frame["question"]]
        else:
            raise StageError(f"the artifact has no prompt column and no question to build one from "
                             f"(columns: {', '.join(frame.columns)})")
        frame = frame.with_columns(pl.Series("prompt", prompts, pl.String))
    messages = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
    return frame.with_columns(pl.col(c).str.json_decode(messages) for c in MESSAGE_COLUMNS)


def sft_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """A `trajectory` artifact as TRL's SFTTrainer reads it: ``messages`` (a list of chat messages, each with the
    record's per-turn ``train`` flag beside its role and content) and ``tools`` (the OpenAI schemas as JSON text,
    which SFTTrainer parses); ``id``, ``source`` and ``train`` ride along."""
    missing = {"messages", "tools", "train"} - set(frame.columns)
    if missing:
        raise StageError(f"--format sft needs a trajectory artifact (sft_set, midtrain_*); this one lacks "
                         f"{', '.join(sorted(missing))}")
    records = []
    for row in frame.iter_rows(named=True):
        messages = [{"role": m["role"], "content": m.get("content") or "", "tool_call_id": m.get("tool_call_id"),
                     "tool_calls": [{"id": c.get("id", ""), "type": "function",
                                     "function": {"name": c["function"]["name"],
                                                  "arguments": c["function"]["arguments"]}}
                                    for c in m.get("tool_calls") or []],
                     "train": bool(flag)}
                    for m, flag in zip(json.loads(row["messages"]), row["train"], strict=True)]
        records.append({"id": row["id"], "source": row["source"], "messages": messages, "tools": row["tools"],
                        "train": list(row["train"])})
    return pl.DataFrame(records)


def jsonl_records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Every column, with the JSON-string columns decoded into nested values."""
    records = frame.to_dicts()
    for record in records:
        for column in (*MESSAGE_COLUMNS, *JSON_COLUMNS):
            if isinstance(record.get(column), str):
                record[column] = json.loads(record[column])
    return records


def published_artifact(name: str, profile: str, data_dir: Path | None) -> Any:
    """The artifact the profile makes of stage ``name`` when it is published already: found by its planned key,
    with no Prefect server, cluster or flow run."""
    from data_contracts.roots import data_root, open_store
    from data_contracts.runner import plan, planned_keys
    from flows.profiles import stage_params
    from flows.registry import stage_named

    keys = planned_keys(plan([name], stage_named), stage_params(profile), "default")
    return open_store(data_root(data_dir)).get(name, keys[name])


def stage_artifact(source: str, profile: str, data_dir: Path | None) -> Any:
    """The artifact the profile makes of stage ``source`` (a cache hit when it is already published, else
    materialized through the store)."""
    artifact = published_artifact(source, profile, data_dir)
    if artifact is None:  # not made yet: through the store, which starts what it needs
        from flows.dag import materialize

        artifact = materialize([source], profile=profile, data_dir=data_dir)[source]
    return artifact


def environment_rows(source: str, output: str | None, format: Format, profile: str, data_dir: Path | None,
                     distractors: int | None) -> list[dict[str, Any]] | None:
    """The episodes to start of a stage whose tasks name environments, in ``format``; None for any other source."""
    from data_contracts.roots import data_root, open_store
    from flows.registry import stage_named
    from inference.environments.exports import environment_rows as rows_of
    from inference.environments.tasks import ServedTasks, inputs_of

    path = Path(source)
    if format not in ("trl", *RL_PARQUET) or output not in (None, "tasks"):
        return None
    if path.is_dir():  # an artifact directory holding its environments (all but noisy_tasks)
        tasks, environments = path / "tasks.parquet", path / "environments.parquet"
        if not (tasks.is_file() and environments.is_file()):
            return None
        served = ServedTasks.from_rows(pl.read_parquet(environments).iter_rows(named=True),
                                       pl.read_parquet(tasks).to_dicts(), f"{path.parent.name}/{path.name}")
        return rows_of(served, format, distractors)  # type: ignore[arg-type]
    if path.exists() or "tasks" not in stage_named(source).outputs:
        return None
    artifact = stage_artifact(source, profile, data_dir)
    if "env_id" not in artifact.scan("tasks").collect_schema().names():
        return None
    served = ServedTasks.from_artifact(artifact, inputs_of(artifact, open_store(data_root(data_dir))))
    return rows_of(served, format, distractors)  # type: ignore[arg-type]


def rl_parquet_frame(frame: pl.DataFrame, format: Format, source: str) -> pl.DataFrame:
    """Prompt rows (rl_mix: prompt, answer, reward_fn) as verl's or SkyRL's RL parquet: the answer is the rule's
    ground truth, the reward function and the other columns ride in ``extra_info`` as JSON text."""
    frame = trl_frame(frame)
    if "answer" not in frame.columns:
        raise StageError(f"--format {format}: the artifact has no answer column; export environment tasks "
                         "(environments, small_envs, noisy_tasks, eval_random_envs) or rl_mix")
    rest = [c for c in frame.columns if c not in ("prompt", "answer")]
    extra = [json.dumps({"index": i, **{c: row[c] for c in rest}}, default=str)
             for i, row in enumerate(frame.select(rest).iter_rows(named=True))]
    rule = {"verl": "reward_model", "skyrl": "reward_spec"}[format]
    key = {"verl": "style", "skyrl": "method"}[format]
    answers = [str(a) for a in frame["answer"]]
    out = frame.select("prompt").with_columns(
        pl.lit(f"gymforge/{Path(source).stem}").alias("data_source"),
        pl.Series(rule, [{key: "rule", "ground_truth": a} for a in answers]),
        pl.Series("extra_info", extra, pl.String))
    if format == "verl":
        out = out.with_columns(pl.lit("long_context").alias("ability"))
    return out


def read_rows(source: str, output: str | None, profile: str, data_dir: Path | None) -> pl.DataFrame:
    """A parquet file, an artifact directory (``<output>.parquet`` inside), or a stage's output (a cache hit when
    it is already published, else materialized through the store)."""
    path = Path(source)
    if path.suffix == ".parquet" and path.is_file():
        return pl.read_parquet(path)
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        chosen = [f for f in files if f.stem == output] if output else [f for f in files if f.stem != "rejected"]
        if not chosen:
            raise StageError(f"{path}: no {output or 'output'} parquet file (found {[f.name for f in files]})")
        return pl.read_parquet(chosen[0])
    from flows.registry import stage_named

    stage = stage_named(source)
    output = output or next(o for o in stage.outputs if o != "rejected")
    if output not in stage.outputs:
        raise StageError(f"stage {source!r} has outputs {', '.join(stage.outputs)}, not {output!r}")
    return stage_artifact(source, profile, data_dir).read(output)


def check_target(format: str, out: Path) -> None:
    """The format and file suffix an export can write, before anything is read."""
    if format not in FORMATS:
        raise StageError(f"--format {format!r}: use {', '.join(FORMATS)}")
    if out.suffix not in (".parquet", ".jsonl") or (format == "jsonl" and out.suffix != ".jsonl"):
        raise StageError(f"--out {out}: use a .parquet or .jsonl file (jsonl format: .jsonl)")


def export(source: str, out: Path, format: Format = "trl", *, output: str | None = None,
           curriculum_stage: str | None = None, profile: str = "tiny", data_dir: Path | None = None,
           distractors: int | None = DISTRACTORS) -> int:
    """Write ``source``'s rows to ``out`` in ``format`` (atomically); the number of rows written. Environment tasks
    are offered their task view (``distractors`` other tools; None: every tool of their environment)."""
    check_target(format, out)
    episodes = environment_rows(source, output, format, profile, data_dir, distractors)
    if episodes is not None:
        write_frame(pl.DataFrame(episodes) if out.suffix == ".parquet" else episodes, out)
        return len(episodes)
    frame = read_rows(source, output, profile, data_dir)
    if curriculum_stage is not None:
        if "curriculum_stage" not in frame.columns:
            raise StageError("--curriculum-stage: the artifact has no curriculum_stage column")
        frame = frame.filter(pl.col("curriculum_stage") == curriculum_stage)
    if format == "sft":
        exported = sft_frame(frame)
        write_frame(exported if out.suffix == ".parquet" else exported.to_dicts(), out)
    elif format in RL_PARQUET:
        exported = rl_parquet_frame(frame, format, source)
        write_frame(exported if out.suffix == ".parquet" else exported.to_dicts(), out)
    else:
        write_frame(trl_frame(frame) if format == "trl" else jsonl_records(frame), out)
    return frame.height

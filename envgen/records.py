"""The ``trajectory`` record: every conversation a model is trained on, whichever route wrote it (the trajectory
standard, ``envgen.trajectory_standard``, says what its rows hold to)."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, Record, cols

TRAJECTORY = Record("trajectory", "A conversation to fine-tune on: OpenAI chat messages with tool calls and results, "
                    "the tools offered, and which turns are trained; one record for every synthesis route.", cols(
    id=(pl.String, "unique id"),
    source=(pl.String, ("the synthesis route (midtrain_env, midtrain_text, decompose, reason, plan, longctx, "
                       "research, ...)")),
    env_id=(pl.String, "the environment, for tool-environment routes"),
    task_id=(pl.String, "the task, for tool-environment routes"),
    seed_id=(pl.String, "the seed (QA seed, KeyChain example, corpus document, research task) of other routes"),
    domain=(pl.String, "the environment's domain, or the route's topic"),
    messages=(JSON, "OpenAI chat messages: system, user, assistant (content, tool_calls), tool (tool_call_id)"),
    tools=(JSON, "the OpenAI function schemas offered (empty list when none)"),
    train=(pl.List(pl.Boolean), ("per message: whether its tokens are trained on (the turn-level loss mask; only "
                                "assistant messages may be true)")),
    verified=(pl.Boolean, "whether the trajectory passed its check"),
    verifier=(pl.String, ("the check that verified it (execution against the rubric, schema conformance, the "
                         "two-way reward, ...)")),
    parent_id=(pl.String, "the trajectory it was augmented from, null for an original"),
    transform=(pl.String, "the augmentation applied to the parent, null for an original"),
    transform_settings=(JSON, "the augmentation's recorded settings"),
    tokens=(pl.Int64, "the chat-templated conversation's length with the project tokenizer"),
    verify_input=(JSON, ("what the checks re-check beside messages and tools, so the row re-verifies on its own: "
                        "{env, task} for execution (the environment record without its database, the task with its "
                        "rubric), {answer, aliases, conditions} for the two-way reward and reasoning completeness, "
                        "and the limits it was held to ({limits: {max_tokens, heldout}})")),
    env_db=(pl.Binary, "the SQLite database an execution-verified episode starts from; null for other verifiers"),
), key=("id",), required=("source", "messages", "tools", "train", "verified"),
    json={"messages": "list", "tools": "list"})

"""The records of tasks/ that no single branch owns: those several branches use (the environment task, which noisy
twins and the difficulty filter extend; the items a generator dropped; the difficulty filters' pass counts; the
trajectories the cold-start selection and the research filters reject) and the ``tokenizer`` stage's."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, STRINGS, Record, cols
from envgen.records import TRAJECTORY

TOKENIZER = Record("tokenizer", "gymforge's byte-level BPE with its chat template.", cols(
    name=(pl.String, "the tokenizer's name"),
    tokenizer_json=(JSON, "the tokenizers library's serialization"),
    chat_template=(pl.String, "ChatML with tool calls and {% generation %} markers"),
    special_tokens=(STRINGS, "the special tokens"),
    vocab_size=(pl.Int64, "vocabulary size, special tokens included"),
    sha256=(pl.String, "hash of tokenizer_json and chat_template"),
    eos_token=(pl.String, "end of turn"),
    pad_token=(pl.String, "padding"),
))

TASK = Record("task", "A task of an environment with its user profile and its rubric.", cols(
    task_id=(pl.String, "unique id"),
    env_id=(pl.String, "the environment"),
    domain=(pl.String, "the domain"),
    system_prompt=(pl.String, "agent instructions and policy texts"),
    description=(pl.String, "the user's first message: what they ask, in what a person knows (no internal keys)"),
    user_profile=(JSON, "{persona, facts: [{name, label, value}]}: what the user knows and tells when asked"),
    rubric=(JSON, ("{expected_diff, required_outputs, tables, components, customer}: customer is the key of the "
                  "customer the task acts for, whose records alone its writes may change")),
    golden_actions=(JSON, "[{name, arguments}] in order"),
    difficulty=(JSON, "difficulty features"),
    noise=(JSON, "{level, transforms}; level 0 for a clean task"),
), key=("task_id",), required=("env_id", "description", "rubric", "golden_actions"),
    json={"user_profile": "object", "rubric": "object", "golden_actions": "list"})

RUN = cols(run=(pl.Int64, "the evaluation run (the report averages 3)"))

ITEM_REJECTED = Record("item_rejected", "A generated item a stage dropped.", cols(
    id=(pl.String, "the item's id"),
    reason=(pl.String, "why"),
))

TRAJECTORY_REJECTED = TRAJECTORY.rejected("not_verified | too_long | heldout | duplicate | near_duplicate | "
                                          "mixture_cap | not_selected")

PASS_COLUMNS = cols(
    pass_count=(pl.Int64, "samples of the reference policy that scored 1 (of pass_k)"),
    pass_k=(pl.Int64, "samples drawn per item by the difficulty filter"),
)
FILTER_COLUMNS = {**PASS_COLUMNS, **cols(pass_window=(pl.String, "the kept window lo..hi of pass counts"))}

PASS_HISTOGRAM = Record("pass_histogram", "How many items reached each pass count.", cols(
    pass_count=(pl.Int64, "a pass count, 0..k"),
    n=(pl.Int64, "items with that pass count"),
), key=("pass_count",))

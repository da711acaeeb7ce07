"""The records of the noise branch: noisy twins of environment tasks, for training and evaluation, and the twins the
solvability check refused."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, STRINGS, Record, col, cols
from tasks.records import RUN, TASK

NOISE_COLUMNS = cols(
    clean_task_id=(pl.String, "the clean task this is the twin of"),
    noise_level=(pl.Int64, "curriculum level 1..L"),
    transforms=(STRINGS, "instruction transforms and tool faults applied"),
    robust_success=(pl.Boolean, "the robust reference agent solved the twin"),
    naive_success=(pl.Boolean, "the naive reference agent solved the twin"),
    robust_clean_success=(pl.Boolean, "the robust agent solved the clean task"),
    naive_clean_success=(pl.Boolean, "the naive agent solved the clean task"),
    naive_by_transform=(JSON, "naive success with each transform alone"),
    scored=(pl.Boolean, "whether the solvability check ran"),
)
NOISY_TASK = TASK.extend("noisy_task", "A noisy twin of a clean task (LongCat-Flash-Thinking-2601 noise curricula).",
                         NOISE_COLUMNS)
NOISY_EVAL_TASK = NOISY_TASK.extend("noisy_eval_task", "A noisy twin of a Random Complex Task.", RUN)
NOISE_REJECTED = Record("noise_rejected", "A twin the solvability check refused.", {
    "task_id": TASK.columns["task_id"], "env_id": TASK.columns["env_id"], "noise": TASK.columns["noise"],
    **NOISE_COLUMNS, "reason": col(pl.String, "why the twin is unsolvable or unscored")})

"""The records of the environments branch (LongCat-Flash-Thinking-2601 3.1.1): compiled domains, verified environments,
Random Complex Tasks, difficulty-filtered tasks and what construction gave up on."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, STRINGS, Record, cols
from tasks.records import FILTER_COLUMNS, RUN, TASK

DOMAIN_GRAPH = Record("domain_graph", "A domain spec compiled: its tools and their dependency graph.", cols(
    domain=(pl.String, "the domain's name"),
    spec_json=(JSON, "the parsed DomainSpec"),
    spec_hash=(pl.String, "stable hash of the spec"),
    n_entities=(pl.Int64, "entities (tables) of the domain"),
    n_tools=(pl.Int64, "tools compiled (the report asks 60+)"),
    n_read_tools=(pl.Int64, "tools that only read"),
    n_write_tools=(pl.Int64, "tools that write"),
    tools=(JSON, "OpenAI function schemas"),
    read_write_map=(JSON, "tool -> tables it reads and writes"),
    edges=(JSON, "[[u, v], ...]: an output of u supplies a required parameter of v"),
    n_edges=(pl.Int64, "edges of the graph"),
    density=(pl.Float64, "edges / (n (n - 1))"),
    executability=(pl.Float64, "share of tools that ran on a seeded database"),
    failed_tools=(STRINGS, "tools that did not run"),
), key=("domain",))

ENVIRONMENT = Record("environment", "A verified environment: a seeded database, the tools of its chains, and the task "
                     "it was built for.", cols(
                         env_id=(pl.String, "<domain>-<partition>-<index>"),
                         domain=(pl.String, "the domain"),
                         spec_json=(JSON, "the DomainSpec (a renamed variant carries its own)"),
                         spec_hash=(pl.String, "hash of spec_json"),
                         seed=(pl.Int64, "seed of the database and the chain sampling"),
                         now=(pl.String, "the database's time, also in its _clock table"),
                         tool_names=(STRINGS, "the environment's tools"),
                         tools=(JSON, "their OpenAI schemas"),
                         edges=(JSON, "[[u, v], ...] among the environment's tools"),
                         chains=(JSON, "the seed chains, lists of tool names; the task uses them all"),
                         fallback_chains=(JSON, "chains added by the fallback to reach the minimum size"),
                         n_tools=(pl.Int64, "tools"),
                         n_edges=(pl.Int64, "edges"),
                         density=(pl.Float64, "edges / (n (n - 1))"),
                         n_chains=(pl.Int64, "seed chains"),
                         fallback_used=(pl.Boolean, "whether the fallback added tools"),
                         expansion=(JSON, "p = f(c, g, |D|) and g per multi-chain decision"),
                         db=(pl.Binary, "the SQLite database"),
                         db_sha256=(pl.String, "hash of db"),
                         task_json=(JSON, "the verified task, so the row replays on its own"),
                     ), key=("env_id",), required=("domain", "tools", "db"),
                     json={"tools": "list", "edges": "list", "chains": "list"})

EVAL_ENVIRONMENT = ENVIRONMENT.extend("eval_environment", "An environment of Random Complex Tasks.", RUN)
EVAL_TASK = TASK.extend("eval_task", "A task of Random Complex Tasks.", RUN)
FILTERED_TASK = TASK.extend("filtered_task", "A task with its difficulty-filter pass count.", FILTER_COLUMNS)
FILTERED_TASK_REJECTED = FILTERED_TASK.rejected("too_hard | too_easy | prompt_too_long")

ENVIRONMENT_REJECTED = Record("environment_rejected", "An environment or task construction gave up on.", cols(
    env_id=(pl.String, "the environment's id"),
    domain=(pl.String, "the domain"),
    stage_step=(pl.String, "construction | task: the step that failed"),
    reason=(pl.String, "why"),
))

"""Record formats: the one source of every column an artifact holds, each documented where it is declared.

A stage's output contract is built from the record it emits plus the rules of its own procedure::

    OUTPUTS = {"keychain": KEYCHAIN.contract(expectations=(matches("first_key", KEY_REGEX),), checks=(...))}

and the gate holds every output to its record exactly: a missing column, a column of another dtype or a column the
record does not declare fails the contract (so an output never drifts from its schema unnoticed). Nested values are
JSON strings (``JSON``); lists of scalars are polars lists. ``gymforge artifacts schema`` prints them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl

from data_contracts.stage import Check, Contract, Expect, Severity

JSON = pl.String()
"""A nested value serialized as JSON text."""

JsonKind = Literal["list", "object", "any"]


@dataclass(frozen=True)
class Column:
    dtype: pl.DataType
    doc: str


def col(dtype: pl.DataType | type[pl.DataType], doc: str) -> Column:
    return Column(dtype() if isinstance(dtype, type) else dtype, doc)


# --- building blocks of contracts --------------------------------------------------------------------------------


def not_null(*columns: str, severity: Severity = "critical") -> tuple[Expect, ...]:
    return tuple(Expect("ExpectColumnValuesToNotBeNull", severity=severity, column=c) for c in columns)


def unique(*columns: str, severity: Severity = "critical") -> Expect:
    """One column unique, or several unique together."""
    if len(columns) == 1:
        return Expect("ExpectColumnValuesToBeUnique", severity=severity, column=columns[0])
    return Expect("ExpectCompoundColumnsToBeUnique", severity=severity, column_list=list(columns))


def in_set(column: str, values: Sequence[Any], severity: Severity = "critical") -> Expect:
    return Expect("ExpectColumnValuesToBeInSet", severity=severity, column=column, value_set=list(values))


def between(column: str, min_value: float | None = None, max_value: float | None = None,
            severity: Severity = "critical") -> Expect:
    return Expect("ExpectColumnValuesToBeBetween", severity=severity, column=column,
                  min_value=min_value, max_value=max_value)


def matches(column: str, regex: str, severity: Severity = "critical") -> Expect:
    return Expect("ExpectColumnValuesToMatchRegex", severity=severity, column=column, regex=regex)


def at_most(column: str, bound: str) -> Expect:
    """``column <= bound`` row by row (a prompt's tokens within its target)."""
    return Expect("ExpectColumnPairValuesAToBeGreaterThanB", column_A=bound, column_B=column, or_equal=True)


def min_length(column: str, chars: int) -> Expect:
    return Expect("ExpectColumnValueLengthsToBeBetween", column=column, min_value=chars)


def json_check(column: str, kind: JsonKind = "any", *, required_keys: Sequence[str] = (), nullable: bool = False,
               severity: Severity = "critical") -> Check:
    """Rows whose ``column`` is not JSON of the given kind fail; for ``object`` (or a ``list`` of objects) every
    object must carry ``required_keys``."""
    keys = tuple(required_keys)

    def bad(value: str | None) -> bool:
        if value is None:
            return not nullable
        try:
            parsed = json.loads(value)
        except ValueError:
            return True
        if kind == "list":
            return not isinstance(parsed, list) or bool(keys) and not all(
                isinstance(item, dict) and all(k in item for k in keys) for item in parsed)
        if kind == "object":
            return not isinstance(parsed, dict) or not all(k in parsed for k in keys)
        return False

    def fn(frame: pl.DataFrame) -> list[bool]:
        return [bad(v) for v in frame[column].to_list()]

    shape = {"list": "a JSON list", "object": "a JSON object", "any": "valid JSON"}[kind]
    description = f"{column} is {shape}" + (f" with keys {list(keys)}" if keys else "")
    return Check(f"{column}_json", fn, severity=severity, description=description)


# --- records -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A record format: documented columns, the key that identifies a row, and the rules every output of it obeys
    (the key unique and not null, ``required`` columns not null, ``json`` columns parseable)."""

    name: str
    doc: str
    columns: Mapping[str, Column]
    key: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    json: Mapping[str, JsonKind] = field(default_factory=dict)

    @property
    def schema(self) -> dict[str, pl.DataType]:
        return {name: column.dtype for name, column in self.columns.items()}

    def contract(self, *, expectations: Iterable[Expect] = (), checks: Iterable[Check] = (),
                 min_rows: int = 0) -> Contract:
        base = [*not_null(*self.key, *self.required)] + ([unique(*self.key)] if self.key else [])
        return Contract(
            columns=self.schema, record=self.name, min_rows=min_rows,
            expectations=(*base, *expectations),
            checks=(*(json_check(c, kind) for c, kind in self.json.items()), *checks),
        )

    def extend(self, name: str, doc: str, columns: Mapping[str, Column], *, key: tuple[str, ...] | None = None,
               json: Mapping[str, JsonKind] | None = None) -> Record:
        """This record plus ``columns`` (a filter adding pass counts, an evaluation set adding its run)."""
        return Record(name, doc, {**self.columns, **columns}, self.key if key is None else key, self.required,
                      {**self.json, **(json or {})})

    def rejected(self, reason: str = "why the row was dropped") -> Record:
        """The record of rows a stage dropped on purpose: every column of this one plus ``reason``."""
        return self.extend(f"{self.name}_rejected", f"{self.doc} Dropped rows, each with its reason.",
                           {"reason": col(pl.String, reason)}, key=())

    def frame(self, rows: Sequence[Mapping[str, Any]] = ()) -> pl.DataFrame:
        """A frame of this record from row dicts (an empty one keeps every column and dtype)."""
        return pl.DataFrame(list(rows), schema=self.schema, orient="row") if rows else pl.DataFrame(schema=self.schema)


def _cols(**columns: tuple[pl.DataType | type[pl.DataType], str] | Column) -> dict[str, Column]:
    return {name: c if isinstance(c, Column) else col(*c) for name, c in columns.items()}


STRINGS = pl.List(pl.String)

# --- long-context QA (LoongRL) -----------------------------------------------------------------------------------

QA_SOURCES = ("hotpotqa", "musique", "2wiki", "world")
SPLITS = ("train", "eval")

QA_SEED = Record("qa_seed", "A multi-hop question with its documents, from a QA dataset or the synthetic world.", _cols(
    id=(pl.String, "source-prefixed id, unique across sources (hotpotqa:<_id>, world:<partition>:<i>)"),
    source=(pl.String, "hotpotqa | musique | 2wiki | world"),
    question=(pl.String, "the question as asked"),
    answer=(pl.String, "the gold answer"),
    aliases=(STRINGS, "other accepted forms of the answer"),
    docs=(JSON, "list of {title, text, is_supporting}: the supporting documents and the dataset's distractors"),
    hops=(pl.Int64, "reasoning hops (supporting documents, or the question decomposition's length)"),
    type=(pl.String, "bridge | comparison | compositional (the dataset's question type)"),
    split=(pl.String, "train | eval; no evaluation question reaches training"),
), key=("id",), required=("question", "answer", "docs"), json={"docs": "list"})

SEED_REJECTED = Record("seed_rejected", "A source record the seeds do not keep.", _cols(
    id=(pl.String, "the record's id in its source"),
    source=(pl.String, "its source"),
    reason=(pl.String, "why (unanswerable, no supporting document, duplicate, leaked into eval...)"),
))

ITEM_REJECTED = Record("item_rejected", "A generated item a stage dropped.", _cols(
    id=(pl.String, "the item's id"),
    reason=(pl.String, "why"),
))

WORLD_SEED = QA_SEED.extend("world_seed", "A question of the synthetic world, with the program that answers it.", _cols(
    program=(JSON, "the graph walk that defines the answer (relations and attribute filters), re-run for uniqueness"),
))

PASS_COLUMNS = _cols(
    pass_count=(pl.Int64, "samples of the reference policy that scored 1 (of pass_k)"),
    pass_k=(pl.Int64, "samples drawn per item by the difficulty filter"),
)
FILTER_COLUMNS = {**PASS_COLUMNS, **_cols(pass_window=(pl.String, "the kept window lo..hi of pass counts"))}

FILTERED_SEED = QA_SEED.extend("filtered_seed", "A QA seed with its difficulty-filter pass count.", FILTER_COLUMNS)
FILTERED_SEED_REJECTED = FILTERED_SEED.rejected("too_hard | too_easy | prompt_too_long | answer_over_cap")

PASS_HISTOGRAM = Record("pass_histogram", "How many items reached each pass count.", _cols(
    pass_count=(pl.Int64, "a pass count, 0..k"),
    n=(pl.Int64, "items with that pass count"),
), key=("pass_count",))

LENGTH_COLUMNS = _cols(
    target_tokens=(pl.Int64, "the prompt length asked for; the prompt lands in [target - 2%, target]"),
    tokens=(pl.Int64, "the final chat-templated prompt's length, counted with `tokenizer`"),
    tokenizer=(pl.String, "name and sha256 of the tokenizer the length was measured with"),
)
LONG_QA_COLUMNS = _cols(
    id=(pl.String, "unique id of the example"),
    seed_id=(pl.String, "the qa_seed it was built from"),
    source=(pl.String, "the seed's source"),
    prompt=(JSON, "chat messages: the passages, then the question; the answer goes in \\boxed{}"),
    answer=(pl.String, "the gold answer"),
    aliases=(STRINGS, "other accepted forms of the answer"),
    placement=(pl.String, "uniform | centred: where the gold documents were placed"),
    **LENGTH_COLUMNS,
    gold_doc_positions=(pl.List(pl.Int64), "passage indices of the seed's own documents"),
    n_docs=(pl.Int64, "passages in the prompt"),
    distractor_source=(pl.String, "where the distractor passages came from (filtered-out seeds, or kept ones)"),
    **PASS_COLUMNS,
)

KEYCHAIN = Record("keychain", "A KeyChain example (LoongRL 3.1): a long context with UUID chains, only the first key "
                  "in the question.", {**LONG_QA_COLUMNS, **_cols(
                      hidden_question=(pl.String, "the seed's question, stated only as the target chain's last value"),
                      first_key=(pl.String, "the key the surface question names"),
                      chain=(STRINGS, "the target chain's keys, first key first"),
                      distractor_chains=(JSON, "list of key lists of the distractor chains"),
                      key_format=(pl.String, "uuid32 | hex8"),
                      hops=(pl.Int64, "keys in the target chain"),
                      n_distractor_chains=(pl.Int64, "distractor chains in the context"),
                      chains_per_1k=(pl.Float64, "the setting the distractor count came from"),
                      curriculum_stage=(pl.String, "where the example enters the curriculum (set by rl_mix)"),
                  )}, key=("id",), required=("seed_id", "prompt", "answer", "hidden_question", "chain", "tokens"),
                  json={"prompt": "list", "distractor_chains": "list"})

PROMPT_REJECTED = Record("prompt_rejected", "A seed a long-context builder could not turn into a prompt.", _cols(
    seed_id=(pl.String, "the seed"),
    kind=(pl.String, "keychain | regular"),
    reason=(pl.String, "why (no length fit within the bounded corrections, too few distractors...)"),
))

REGULAR_QA = Record("regular_qa", "The same long-context extension as KeyChain with the question asked directly (LoongRL "
                    "Table 1's standard multi-hop QA).", {**LONG_QA_COLUMNS, **_cols(
                        question=(pl.String, "the question asked"),
                    )}, key=("id",), required=("prompt", "answer"), json={"prompt": "list"})

NEEDLE = Record("needle", "A RULER needle-in-a-haystack example (multi-key or multi-value).", _cols(
    id=(pl.String, "unique id"),
    task=(pl.String, "multikey | multivalue"),
    prompt=(JSON, "chat messages: the haystack with the needles, then the query"),
    query_key=(pl.String, "the key asked for"),
    answer=(pl.String, "the required values, comma-separated (what needle_all compares)"),
    answers=(STRINGS, "the required values"),
    needles=(STRINGS, "every key hidden in the haystack"),
    n_needles=(pl.Int64, "needles hidden"),
    key_type=(pl.String, "words | numbers"),
    **LENGTH_COLUMNS,
    base=(pl.String, "the haystack's source: world, or the local directory"),
), key=("id",), required=("prompt",), json={"prompt": "list"})

MATH_PROBLEM = Record("math_problem", "A short math problem with a verifiable answer.", _cols(
    id=(pl.String, "unique id"),
    kind=(pl.String, "hard (open-ended) | easy_mc (four choices)"),
    question=(pl.String, "the problem statement"),
    answer=(pl.String, "the answer (a choice letter for easy_mc)"),
    choices=(STRINGS, "the four choices of an easy_mc problem, empty otherwise"),
    source=(pl.String, "synthetic:<generator> or file:<name>"),
    reward_fn=(pl.String, "math | choice: the reward that scores it"),
), key=("id",), required=("question", "answer"))

RL_MIX = Record("rl_mix", "One row of the RL mixture (LoongRL Table 1) in one curriculum stage.", _cols(
    id=(pl.String, "the item's id; an item has one row per curriculum stage it enters"),
    category=(pl.String, "keychain | qa | needle_multikey | needle_multivalue | math_hard | math_easy"),
    curriculum_stage=(pl.String, "warmup | stage1 | stage2"),
    prompt=(JSON, "chat messages"),
    answer=(pl.String, "the gold answer"),
    aliases=(STRINGS, "other accepted forms of the answer"),
    reward_fn=(pl.String, "the reward of envgen.rewards.REWARDS that scores the row"),
    source_id=(pl.String, "the id of the item in its source artifact"),
    tokens=(pl.Int64, "prompt tokens, when the source counted them"),
    **PASS_COLUMNS,
), key=("curriculum_stage", "id"), required=("prompt", "answer", "reward_fn"), json={"prompt": "list"})

MIX_SUMMARY = Record("mix_summary", "What the mixture took per category.", _cols(
    category=(pl.String, "a mixture category"),
    requested=(pl.Int64, "items asked for (Table 1 count times scale)"),
    available=(pl.Int64, "items the inputs offered"),
    taken=(pl.Int64, "items taken"),
), key=("category",))

# --- the synthetic world -----------------------------------------------------------------------------------------

WORLD_RELATIONS = ("located_in", "born_in", "works_for", "married_to", "founded_by", "headquartered_in",
                   "created_by", "published_by", "organized_by", "held_in")

ENTITY = Record("entity", "An entity of the synthetic world's knowledge graph.", {**_cols(
    entity_id=(pl.String, "E<index>"),
    type=(pl.String, "person | organisation | city | country | work | event"),
    name=(pl.String, "the entity's name, unique"),
    aliases=(STRINGS, "other names"),
    category=(pl.String, "the kind within its type (an organisation's industry, a work's medium)"),
    born=(pl.Date, "a person's birth date"),
    founded=(pl.Int64, "an organisation's founding year"),
    released=(pl.Date, "a work's release date"),
    held=(pl.Date, "an event's date"),
    population=(pl.Int64, "a city's or country's population"),
    employees=(pl.Int64, "an organisation's employees"),
    budget=(pl.Int64, "a work's or event's budget"),
    attendance=(pl.Int64, "an event's attendance"),
), **{r: col(pl.String, f"entity_id of the {r.replace('_', ' ')} relation's object, if any")
      for r in WORLD_RELATIONS}}, key=("entity_id",), required=("name", "type"))

DOCUMENT = Record("document", "An encyclopedia-style document of one world entity.", _cols(
    doc_id=(pl.String, "D<index>"),
    title=(pl.String, "the entity's name"),
    text=(pl.String, "the document"),
    entity_id=(pl.String, "the entity it describes"),
), key=("doc_id",), required=("title", "text"))

RELATION = Record("relation", "One edge of the world's knowledge graph.", _cols(
    subject=(pl.String, "entity_id"),
    relation=(pl.String, "one of the world's relations"),
    object=(pl.String, "entity_id"),
), required=("subject", "object"))

TOKENIZER = Record("tokenizer", "gymforge's byte-level BPE with its chat template.", _cols(
    name=(pl.String, "the tokenizer's name"),
    tokenizer_json=(JSON, "the tokenizers library's serialization"),
    chat_template=(pl.String, "ChatML with tool calls and {% generation %} markers"),
    special_tokens=(STRINGS, "the special tokens"),
    vocab_size=(pl.Int64, "vocabulary size, special tokens included"),
    sha256=(pl.String, "hash of tokenizer_json and chat_template"),
    eos_token=(pl.String, "end of turn"),
    pad_token=(pl.String, "padding"),
))

# --- tool environments (LongCat-Flash-Thinking-2601 3.1.1) -------------------------------------------------------

DOMAIN_GRAPH = Record("domain_graph", "A domain spec compiled: its tools and their dependency graph.", _cols(
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
                     "it was built for.", _cols(
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

TASK = Record("task", "A task of an environment with its user profile and its rubric.", _cols(
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

RUN = _cols(run=(pl.Int64, "the evaluation run (the report averages 3)"))
EVAL_ENVIRONMENT = ENVIRONMENT.extend("eval_environment", "An environment of Random Complex Tasks.", RUN)
EVAL_TASK = TASK.extend("eval_task", "A task of Random Complex Tasks.", RUN)
FILTERED_TASK = TASK.extend("filtered_task", "A task with its difficulty-filter pass count.", FILTER_COLUMNS)
FILTERED_TASK_REJECTED = FILTERED_TASK.rejected("too_hard | too_easy | prompt_too_long")

ENVIRONMENT_REJECTED = Record("environment_rejected", "An environment or task construction gave up on.", _cols(
    env_id=(pl.String, "the environment's id"),
    domain=(pl.String, "the domain"),
    stage_step=(pl.String, "construction | task: the step that failed"),
    reason=(pl.String, "why"),
))

NOISE_COLUMNS = _cols(
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

# --- rollouts ----------------------------------------------------------------------------------------------------

FAILURE_LABELS = ("agent", "user", "tool")
STOP_REASONS = ("done", "max_turns", "length", "context_overflow")

ROLLOUT = Record("rollout", "A policy's rollout, stored as tokens (DESIGN.md section 5).", _cols(
    id=(pl.String, "<item>#<sample>"),
    group_id=(pl.String, "the item: samples of one group share it"),
    source=(pl.String, "the stage or run that sampled it"),
    item_id=(pl.String, "the prompt or task id"),
    env_id=(pl.String, "the environment, for tool tasks"),
    task_id=(pl.String, "the task, for tool tasks"),
    sample_index=(pl.Int64, "index within the group"),
    messages=(JSON, "the conversation in OpenAI format, tool calls and results included"),
    segments=(JSON, "per context segment: turns of prompt ids, output ids, logprobs, policy version, loss mask"),
    n_segments=(pl.Int64, "segments (context management starts a new one on summary or reset)"),
    n_turns=(pl.Int64, "agent turns"),
    n_output_tokens=(pl.Int64, "sampled tokens"),
    min_policy_version=(pl.Int64, "oldest policy version among the tokens"),
    max_policy_version=(pl.Int64, "newest policy version among the tokens"),
    reward=(pl.Float64, "the product of reward_components"),
    reward_components=(JSON, "named reward components"),
    verified=(pl.Boolean, "reward 1"),
    failure=(pl.String, "agent | user | tool; null when verified"),
    stop_reason=(pl.String, "done | max_turns | length | context_overflow"),
), key=("id",), required=("segments",), json={"messages": "list", "segments": "list", "reward_components": "object"})

# --- trajectories to train on (mid-training, cold start, research) ---------------------------------------------

TRAJECTORY = Record("trajectory", "A conversation to fine-tune on: OpenAI chat messages with tool calls and results, "
                    "the tools offered, and which turns are trained; one record for every synthesis route.", _cols(
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

TRAJECTORY_REJECTED = TRAJECTORY.rejected("not_verified | too_long | heldout | duplicate | near_duplicate | "
                                          "mixture_cap | not_selected")

SELECTION_SCORE = Record("selection_score", "One candidate of a cold-start selection: its sliding-window perplexity "
                         "score and what the selection did with it (LongCat-Flash-Thinking-2601 3.1.2).", _cols(
    id=(pl.String, "the candidate trajectory"),
    source=(pl.String, "its synthesis route"),
    domain=(pl.String, "its domain or topic"),
    parent_id=(pl.String, "the trajectory it was augmented from, null for an original"),
    tokens=(pl.Int64, "its length with the project tokenizer"),
    score=(pl.Float64, ("max over sliding windows of the window's mean perplexity under the reference model; null "
                       "when not scored")),
    mean_perplexity=(pl.Float64, "perplexity of the whole sequence (what average filtering uses), for comparison"),
    weight=(pl.Float64, "the factor its K-Center-Greedy distance is weighted by (score ** alpha, normalized)"),
    status=(pl.String, ("selected | not_selected | duplicate | near_duplicate | too_long | not_verified | heldout | "
                       "mixture_cap")),
    pick=(pl.Int64, "its position in the greedy order, null when not selected"),
    distance=(pl.Float64, "embedding distance to the nearest selected candidate (0 for a selected one)"),
), key=("id",), required=("source", "status"))

SELECTION_SUMMARY = Record("selection_summary", "Figures of one selection: coverage, score distribution, mixture.",
                           _cols(
    name=(pl.String, "the figure (coverage_mean_distance, score_p50, mixture:<route>, ...)"),
    value=(pl.Float64, "its value"),
    note=(pl.String, "what it means or how it was set"),
), key=("name",))

# --- training ------------------------------------------------------------------------------------------------

LOSS_CURVE = Record("loss_curve", "Mean training loss per window of steps.", _cols(
    step=(pl.Int64, "the window's last step"),
    loss=(pl.Float64, "mean loss over the window"),
), key=("step",))

TRAINING_SUMMARY = Record("training_summary", "What a training stage did to its model.", _cols(
    base=(pl.String, "the base model: an embedded size, a local directory or a model artifact key"),
    steps=(pl.Int64, "optimizer steps taken"),
    examples=(pl.Int64, "training examples"),
    final_loss=(pl.Float64, "loss of the last step"),
    parameters=(pl.Int64, "parameters of the model"),
    dtype=(pl.String, "dtype of the weights"),
))

TRAINING_METRIC = Record("training_metric", "One logged figure of a training run (long format: one row per step, split "
                         "and name).", _cols(
    step=(pl.Int64, "optimizer step the figure was logged at (0: before the first step)"),
    split=(pl.String, "train | eval"),
    name=(pl.String, "loss, learning_rate, grad_norm, num_tokens, tool_call_format, tool_call_valid, ..."),
    value=(pl.Float64, "its value"),
), key=("step", "split", "name"))

SFT_REJECTED = Record("sft_rejected", "A trajectory an SFT run did not train on.", _cols(
    id=(pl.String, "the trajectory"),
    source=(pl.String, "its synthesis route"),
    tokens=(pl.Int64, "its chat-templated length with the base model's tokenizer"),
    reason=(pl.String, "not_verified | too_long | no_trained_turn"),
))

# --- reinforcement learning ---------------------------------------------------------------------------------------

RL_SAMPLE = Record("rl_sample", "A sample an RL run consumed or dropped: the audit trail of its staleness bound.", _cols(
    sample_id=(pl.String, "<group id>#<index>"),
    group_id=(pl.String, "the group: samples of one task copy, advantages taken within it"),
    task_id=(pl.String, "the task or prompt"),
    source=(pl.String, "the domain of an environment task, the category of a prompt"),
    min_policy_version=(pl.Int64, "oldest policy version among the sample's tokens (null: it has none)"),
    max_policy_version=(pl.Int64, "newest policy version among the sample's tokens (null: it has none)"),
    trainer_version=(pl.Int64, "the trainer version that consumed (or dropped) it"),
    staleness=(pl.Int64, "trainer_version - min_policy_version (0 for a sample without tokens)"),
    max_staleness=(pl.Int64, "the run's staleness bound S: a trained sample has staleness <= S"),
    admission_version=(pl.Int64, "the trainer version when the sample was admitted"),
    admission_slot=(pl.Int64, "accepted + running samples, this one included, when it was admitted"),
    admission_limit=(pl.Int64, "AReaL's bound then: (S + admission_version + 1) x batch_size >= admission_slot"),
    reward=(pl.Float64, "the sample's reward"),
    advantage=(pl.Float64, "the advantage it was trained with (times its weight); null when not trained"),
    weight=(pl.Float64, "its weight (a self-verification sample's: the judged group's uncertainty)"),
    trained=(pl.Boolean, "whether it entered the loss"),
    drop_reason=(pl.String, "why it was not trained (stale, equal rewards, a reward that raised...); null if trained"),
    n_output_tokens=(pl.Int64, "sampled tokens"),
), key=("sample_id",), required=("trainer_version", "staleness", "trained"))

RL_STEP = Record("rl_step", "One optimizer step of an RL run.", _cols(
    version=(pl.Int64, "the policy version the step produced"),
    loss=(pl.Float64, "the policy loss"),
    kl=(pl.Float64, "k3 KL to the starting policy (0 when beta is 0)"),
    clip_ratio=(pl.Float64, "share of tokens (of sequences, at sequence level) clipped where the clip binds"),
    ratio_mean=(pl.Float64, "mean importance ratio"),
    behaviour_weight_mean=(pl.Float64, "mean behaviour weight (1 when not used)"),
    tokens=(pl.Float64, "trained tokens"),
    grad_norm=(pl.Float64, "gradient norm before clipping"),
    learning_rate=(pl.Float64, "the learning rate after the step"),
    groups=(pl.Float64, "groups consumed"),
    zero_variance_groups=(pl.Float64, "groups whose rewards were all equal: reported, not trained"),
    trained_samples=(pl.Float64, "samples in the loss"),
    ratio_on_policy=(pl.Float64, "mean token ratio (trainer / engine) of samples this version drew; null if none"),
    reward_mean=(pl.Float64, "mean reward of the consumed samples"),
    reward_std=(pl.Float64, "their standard deviation"),
    staleness_mean=(pl.Float64, "mean staleness of the consumed samples"),
    staleness_max=(pl.Int64, "their largest staleness (never above max_staleness)"),
    queue_depth=(pl.Int64, "samples waiting after the step"),
    samples_per_s=(pl.Float64, "trained samples per second since the run started"),
    consumed_per_s=(pl.Float64, "consumed samples (trained or equal-reward) per second"),
    engine_load=(pl.Float64, "engine-busy time over wall time, over every controller"),
    wall_s=(pl.Float64, "seconds since the run started (across resumes)"),
    verifying=(pl.Boolean, "whether the self-verification phase is on"),
    noise_level=(pl.Int64, "the noise curriculum's level (0 when off)"),
    drops=(pl.Int64, "samples dropped at consumption so far"),
    requeued=(pl.Int64, "samples handed out again after a controller died, so far"),
), key=("version",))

# --- local search and deep research (LongCat-Flash-Thinking-2601 3.1.3, LongCat-DeepResearch) -------------------

SEARCH_INDEX = Record("search_index", "What a search index artifact holds: its corpus and its engine.", _cols(
    corpus_source=(pl.String, "world, a local directory or file, or KIND:PATH of a QA dataset"),
    corpus_fingerprint=(pl.String, "sha256 over every document in order: the same corpus gives the same index"),
    documents=(pl.Int64, "documents indexed"),
    terms=(pl.Int64, "distinct terms of the vocabulary"),
    engine=(pl.String, "the search engine library"),
    engine_version=(pl.String, "its version"),
))

SEARCH_QA = Record("search_qa", "A question of agent-based QA synthesis: a long-tail entity's sampled attributes, the "
                   "ground truth verified with search, the answer unique, difficulty from the answer agent.", _cols(
    id=(pl.String, "search_qa:<partition>:<index>"),
    question=(pl.String, "the question as asked"),
    answer=(pl.String, "the ground-truth entity's name"),
    aliases=(STRINGS, "other accepted forms of the answer"),
    entity_id=(pl.String, "the ground-truth entity"),
    doc_id=(pl.String, "its document in the search index"),
    entity_type=(pl.String, "person | organization | city | work | event | country"),
    constraints=(JSON, "[{attribute, phrase, value}]: the attributes the question states, all true of the answer"),
    n_constraints=(pl.Int64, "attributes in the final question"),
    fsm=(JSON, "[{state, event, detail}]: every state the item passed and the transition taken"),
    attempts=(pl.Int64, "question syntheses before acceptance (bounded)"),
    answer_k=(pl.Int64, "answer-agent samples"),
    answer_correct=(pl.Int64, "samples that found the ground truth"),
    answer_accuracy=(pl.Float64, "answer_correct / answer_k"),
    difficulty=(pl.String, "easy | medium | hard | unsolved, graded by the answer agent's accuracy"),
    answer_engine=(pl.String, "the answer agent's engine"),
    split=(pl.String, "train | eval"),
), key=("id",), required=("question", "answer", "fsm"), json={"constraints": "list", "fsm": "list"})

SEARCH_QA_REJECTED = Record("search_qa_rejected", "An entity agent-based QA synthesis gave up on.", _cols(
    id=(pl.String, "the item's id"),
    entity_id=(pl.String, "the entity extracted, if any"),
    reason=(pl.String, "why (unverifiable attributes, a multi-answer conflict left after the retries, ...)"),
    fsm=(JSON, "[{state, event, detail}]: the states passed before giving up"),
), json={"fsm": "list"})

RESEARCH_TASK = Record("research_task", "A research question with its rubric (LongCat-DeepResearch 3.2), from a frozen "
                       "multi-source brief or from a construction article excluded from search.", _cols(
    task_id=(pl.String, "research:<route>:<partition>:<index>"),
    route=(pl.String, "brief | article"),
    query=(pl.String, "the question given to the answering agent (no rubric, no construction evidence)"),
    profile=(JSON, "the target profile: {language, topic, breadth, intended_report, as_of}"),
    topic_entity=(pl.String, "the entity the task is about"),
    brief=(JSON, "brief route: {facts: [{fact, doc_id, excerpt}], doc_ids, limitations}; null for an article"),
    construction_doc_ids=(STRINGS, "the documents the task and rubric were built from"),
    excluded_doc_ids=(STRINGS, "documents hidden from search (the construction article)"),
    rubric=(JSON, "{criteria: [{id, title, weight, category, terms, answer_terms, together, evidence, years}]}"),
    n_criteria=(pl.Int64, "criteria retained"),
    gate=(JSON, "[{id, support, decision, doc_ids}]: the searchability gate's verdict per factual criterion"),
), key=("task_id",), required=("query", "rubric"), json={"profile": "object", "rubric": "object", "gate": "list"})

RESEARCH_TASK_REJECTED = Record("research_task_rejected", "A research task the gate or the checks refused.", _cols(
    task_id=(pl.String, "the task's id"),
    route=(pl.String, "brief | article"),
    query=(pl.String, "its query"),
    reason=(pl.String, "why (a criterion left at Revise, too few searchable criteria, answer leakage, ...)"),
    gate=(JSON, "the gate's verdicts, when it ran"),
), json={"gate": "list"})

RESEARCH_RUN = Record("research_run", "One teacher execution of the research harness on a task.", _cols(
    run_id=(pl.String, "hash of task, query, teacher, harness settings"),
    task_id=(pl.String, "the research task"),
    query=(pl.String, "the query researched"),
    teacher=(pl.String, "the teacher engine (reference, or openai:URL#MODEL, ...)"),
    harness=(pl.String, "the harness's name and version"),
    status=(pl.String, "complete | partial (some sections failed) | failed (the run stopped)"),
    stop_reason=(pl.String, "why a failed run stopped; null otherwise"),
    report=(pl.String, "the final report, Markdown with [cite:DOC_ID] citations"),
    spec=(JSON, "the final ResearchSpec"),
    candidate_specs=(JSON, "the Planning Writers' valid candidate specs"),
    sections=(JSON, "[{id, title, status, call_id, text, reason}] per dispatchable section"),
    directives=(JSON, "the Global Editor's directives kept"),
    decisions=(JSON, "what the harness did with each directive and Local Editor reply"),
    citations=(pl.Int64, "citations in the report"),
    citations_supported=(pl.Int64, "citations whose source supports the sentence"),
    citation_support=(pl.Float64, "citations_supported / citations; null without citations"),
    dangling_citations=(pl.Int64, "citations to a missing or excluded document"),
    rubric_score=(pl.Float64, "the task rubric's weighted score of the report (ResearchRubrics convention)"),
    rubric_verdicts=(JSON, "criterion id -> satisfied | partially | not"),
    n_calls=(pl.Int64, "role calls of the run"),
), key=("run_id",), required=("task_id", "teacher", "status"),
    json={"sections": "list", "directives": "list", "decisions": "list", "candidate_specs": "list"})

RESEARCH_CALL = Record("research_call", "One role call of a research run: who was asked what, on which inputs, and "
                       "whether its trajectory was kept.", _cols(
    id=(pl.String, "<run_id>/<call_id>: the trajectory's id"),
    run_id=(pl.String, "the run"),
    call_id=(pl.String, "the call within the run (plan/writer/1, research/S1.2, edit/local/S1.2, ...)"),
    role=(pl.String, "the role: planning_writer, planning_judge, critic, reviser, researcher, global_editor..."),
    branch=(pl.String, "the section of a parallel branch (researchers, local editors); null otherwise"),
    depends_on=(STRINGS, "the calls whose outputs its inputs were made from"),
    status=(pl.String, "complete | failed"),
    error=(pl.String, "what failed, for a failed call"),
    attempts=(pl.Int64, "engine attempts"),
    tool_calls=(pl.Int64, "tool calls made"),
    teacher=(pl.String, "the teacher engine"),
    harness=(pl.String, "the harness's name and version"),
    kept=(pl.Boolean, "whether its trajectory passed the filters"),
    filter_reason=(pl.String, "why it was filtered out (role identity, tool closure, artifact validity)"),
), key=("id",), required=("run_id", "call_id", "role", "status"))

# --- evaluation (LongCat-Flash-Thinking-2601 sections 4 and 5.1, LoongRL's length figures) ---------------------

EVAL_ITEM = Record("eval_item", "One evaluation item under one strategy at one width: what it scored and what it "
                   "cost.", _cols(
    suite=(pl.String, "the suite (keychain, needles, qa, math, noise, random_tasks, context)"),
    variant=(pl.String, "the suite's held-out variant (its data partition: eval-4096, default, ...)"),
    item_id=(pl.String, "the item: a prompt row's id or a task id"),
    source=(pl.String, "the item's category (keychain, regular, needles, math, world, a domain, ...)"),
    domain=(pl.String, "the environment's domain, or the prompt's source"),
    difficulty=(pl.String, "the item's difficulty bucket (math kind, golden calls, hops), null when none"),
    length=(pl.Int64, "prompt tokens with the data's tokenizer, null when not counted"),
    noise_level=(pl.Int64, "0 for a clean task, the twin's level otherwise; null for prompts"),
    noise_types=(STRINGS, "the noise transforms a twin carries"),
    clean_task_id=(pl.String, "a noisy twin's clean task (pairs them for the robustness gap)"),
    run=(pl.Int64, "the Random Complex Tasks run, null elsewhere"),
    strategy=(pl.String, "sample | single | self_consistency | best_of_k | heavy_thinking | context:<name>"),
    k=(pl.Int64, "width: samples the strategy drew (for sample and context rows: the samples averaged)"),
    score=(pl.Float64, ("the strategy's score of the item in [0, 1] (sample and context rows: Avg@k); null when "
                       "not scored")),
    n_samples=(pl.Int64, "samples scored (tool and user failures are not the agent's and are left out)"),
    n_correct=(pl.Int64, "of them, fully correct (Pass@k's c)"),
    tokens=(pl.Int64, "tokens generated for this result: every stage-1 sample used plus the summaries"),
    summary_prompt_tokens=(pl.Int64, "prompt tokens the summary model read (heavy_thinking), 0 otherwise"),
    answer=(pl.String, "the final answer (the vote, the summary's box), null for episodes"),
    failures=(JSON, "{agent, user, tool}: failure labels over the samples"),
    stop_reasons=(JSON, "{done, max_turns, length, context_overflow}: why the samples ended"),
    status=(pl.String, "scored | infra_error (the engine failed after its retries: never scored as wrong)"),
    error=(pl.String, "the infrastructure error, null when scored"),
    overlap=(pl.Boolean, ("the item appears in the model's training data (found through the catalog lineage); "
                         "summaries leave it out")),
), key=("item_id", "strategy", "k"), required=("suite", "strategy", "k", "status", "overlap"),
    json={"failures": "object", "stop_reasons": "object"})

EVAL_SUMMARY = Record("eval_summary", "One figure of an evaluation: a metric of a strategy at a width over a group of "
                      "items, with its bootstrap interval.", _cols(
    suite=(pl.String, "the suite"),
    variant=(pl.String, "the held-out variant"),
    strategy=(pl.String, "the strategy, as in eval_item"),
    k=(pl.Int64, "width, or the k of Pass@k / Avg@k"),
    metric=(pl.String, ("accuracy | pass@k | avg@k | gap (clean minus noisy twin, paired) | sc_at_budget / "
                       "sc_at_read_budget (self-consistency interpolated at this result's generated tokens / generated "
                       "plus summary-prompt tokens) | ht_minus_sc_at_budget / ht_minus_sc_at_read_budget (the paired "
                       "difference per item, with its interval)")),
    group=(pl.String, ("all, or the attribute items are grouped by (domain, difficulty, length, noise_level, "
                      "noise_type, run, source)")),
    value=(pl.String, "the group's value (all for the whole suite)"),
    n=(pl.Int64, "items in the figure"),
    estimate=(pl.Float64, "the figure"),
    ci_lo=(pl.Float64, "lower end of its bootstrap interval"),
    ci_hi=(pl.Float64, "upper end"),
    tokens=(pl.Float64, "mean generated tokens per item"),
    n_overlap=(pl.Int64, "items of the group left out because the model trained on them"),
    n_infra_errors=(pl.Int64, "items of the group left out because the engine failed"),
    failures=(JSON, "{agent, user, tool}: failure labels over the group's samples"),
), key=("strategy", "k", "metric", "group", "value"), required=("metric", "n"), json={"failures": "object"})

HELDOUT_SCORE = Record("heldout_score", "One sampled attempt of a model at a held-out RL task, scored by the task's own "
                        "reward (the experiments' unit of measurement).", _cols(
    task_id=(pl.String, "the task, as the RL sources name it (source:id for prompts)"),
    source=(pl.String, "the task's source: keychain, regular, qa... for prompts, the domain for environment tasks"),
    kind=(pl.String, "prompt | env"),
    noise_level=(pl.Int64, "0 for a clean task, a noisy twin's level otherwise"),
    clean_task_id=(pl.String, "a noisy twin's clean task (pairs them for the robustness gap), null otherwise"),
    sample=(pl.Int64, "the attempt's index, 0..k-1"),
    reward=(pl.Float64, "the task's reward of the attempt, in [0, 1]"),
), key=("task_id", "sample"), required=("source", "kind", "noise_level", "reward"))

RECORDS: dict[str, Record] = {record.name: record for record in (
    QA_SEED, SEED_REJECTED, ITEM_REJECTED, PROMPT_REJECTED, WORLD_SEED, FILTERED_SEED, FILTERED_SEED_REJECTED,
    PASS_HISTOGRAM, KEYCHAIN, REGULAR_QA, NEEDLE, MATH_PROBLEM, RL_MIX, MIX_SUMMARY, ENTITY, DOCUMENT, RELATION,
    TOKENIZER, DOMAIN_GRAPH, ENVIRONMENT, TASK, EVAL_ENVIRONMENT, EVAL_TASK, FILTERED_TASK, FILTERED_TASK_REJECTED,
    ENVIRONMENT_REJECTED, NOISY_TASK, NOISY_EVAL_TASK, NOISE_REJECTED, ROLLOUT, TRAJECTORY, LOSS_CURVE,
    TRAINING_SUMMARY, TRAJECTORY_REJECTED, SELECTION_SCORE, SELECTION_SUMMARY, RL_SAMPLE, RL_STEP,
    SEARCH_INDEX, SEARCH_QA, SEARCH_QA_REJECTED, RESEARCH_TASK, RESEARCH_TASK_REJECTED, RESEARCH_RUN, RESEARCH_CALL,
    TRAINING_METRIC, SFT_REJECTED, EVAL_ITEM, EVAL_SUMMARY, HELDOUT_SCORE,
)}
"""Every record by name."""

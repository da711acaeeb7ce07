"""The records of the long-context branch (LoongRL): QA seeds and their difficulty filter, KeyChain and regular QA
prompts, needles, math problems and the RL mixture."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, STRINGS, Record, cols
from tasks.records import FILTER_COLUMNS, PASS_COLUMNS

SPLITS = ("train", "eval")

QA_SEED = Record("qa_seed", "A multi-hop question with its documents, from a QA dataset or the synthetic world.", cols(
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

SEED_REJECTED = Record("seed_rejected", "A source record the seeds do not keep.", cols(
    id=(pl.String, "the record's id in its source"),
    source=(pl.String, "its source"),
    reason=(pl.String, "why (unanswerable, no supporting document, duplicate, leaked into eval...)"),
))

FILTERED_SEED = QA_SEED.extend("filtered_seed", "A QA seed with its difficulty-filter pass count.", FILTER_COLUMNS)
FILTERED_SEED_REJECTED = FILTERED_SEED.rejected("too_hard | too_easy | prompt_too_long | answer_over_cap")

LENGTH_COLUMNS = cols(
    target_tokens=(pl.Int64, "the prompt length asked for; the prompt lands in [target - 2%, target]"),
    tokens=(pl.Int64, "the final chat-templated prompt's length, counted with `tokenizer`"),
    tokenizer=(pl.String, "name and sha256 of the tokenizer the length was measured with"),
)
LONG_QA_COLUMNS = cols(
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
                  "in the question.", {**LONG_QA_COLUMNS, **cols(
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

PROMPT_REJECTED = Record("prompt_rejected", "A seed a long-context builder could not turn into a prompt.", cols(
    seed_id=(pl.String, "the seed"),
    kind=(pl.String, "keychain | regular"),
    reason=(pl.String, "why (no length fit within the bounded corrections, too few distractors...)"),
))

REGULAR_QA = Record("regular_qa", "The same long-context extension as KeyChain with the question asked directly (LoongRL "
                    "Table 1's standard multi-hop QA).", {**LONG_QA_COLUMNS, **cols(
                        question=(pl.String, "the question asked"),
                    )}, key=("id",), required=("prompt", "answer"), json={"prompt": "list"})

NEEDLE = Record("needle", "A RULER needle-in-a-haystack example (multi-key or multi-value).", cols(
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

MATH_PROBLEM = Record("math_problem", "A short math problem with a verifiable answer.", cols(
    id=(pl.String, "unique id"),
    kind=(pl.String, "hard (open-ended) | easy_mc (four choices)"),
    question=(pl.String, "the problem statement"),
    answer=(pl.String, "the answer (a choice letter for easy_mc)"),
    choices=(STRINGS, "the four choices of an easy_mc problem, empty otherwise"),
    source=(pl.String, "synthetic:<generator> or file:<name>"),
    reward_fn=(pl.String, "math | choice: the reward that scores it"),
), key=("id",), required=("question", "answer"))

RL_MIX = Record("rl_mix", "One row of the RL mixture (LoongRL Table 1) in one curriculum stage.", cols(
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

MIX_SUMMARY = Record("mix_summary", "What the mixture took per category.", cols(
    category=(pl.String, "a mixture category"),
    requested=(pl.Int64, "items asked for (Table 1 count times scale)"),
    available=(pl.Int64, "items the inputs offered"),
    taken=(pl.Int64, "items taken"),
), key=("category",))

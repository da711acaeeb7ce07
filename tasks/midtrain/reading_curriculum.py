"""Stage `reading_curriculum`: cold-start SFT rows that teach a small model to read long context before KeyChain RL.

Three levels, each a ~1K-token context of world documents (drawn as KeyChain draws distractors) with links of
KeyChain's form ``KEY: VALUE`` inserted at sentence boundaries (short hex keys, a short quoted value at the end):

- ``needle``: one link ``K: "value"``; the question asks for the value of K;
- ``one_hop``: ``K1: K2`` and ``K2: "value"``; the question names K1 only;
- ``two_hop``: ``K1: K2``, ``K2: K3``, ``K3: "value"``.

The assistant answers in ``\\boxed{}`` (the KeyChain reward's format), directly or after tracing the chain key by
key. Rows are `trajectory` records (source ``reading_curriculum``, domain = level), so `sft` trains on the artifact
as it is (a phase of an experiment's ``base.cold_start``) and `sft_set` mixes it as a route.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

import polars as pl
from pydantic import Field

from data_contracts.stage import REJECTED, Artifact, Check, rng_for, seed_for, stage
from envgen.records import TRAJECTORY
from tasks.longctx.keychain import (
    KEY_FORMATS,
    PASSAGE_HEADER,
    PASSAGES_WHOLE,
    link_pattern,
    link_statements,
    make_keys,
    passages,
)
from tasks.longctx.needles import ADJECTIVES, NOUNS, base_pool
from tasks.longctx.token_budget import (
    BudgetFiller,
    Reject,
    TokenCounter,
    boundaries,
    chat_frame,
    cut_mid_sentence,
    insert_cost,
    length_window,
)
from tasks.midtrain.midtrain_longctx import answer_text, chain_steps
from tasks.midtrain.trajectory_stages import TrajectoryParams, answer_row, token_counter, trajectory_contract
from tasks.records import ITEM_REJECTED
from tasks.tokenizer import LengthParams, resolve_tokenizer

STAGE = "reading_curriculum"
LEVELS = {"needle": 1, "one_hop": 2, "two_hop": 3}
"""Level -> keys in its chain (the last key's value is the answer)."""
INSTRUCTION = ("Read the passages below. Some sentences in them are links of the form KEY: VALUE, where the value is "
               "either another key or a value in double quotes.")
QUESTION = {
    "needle": "What is the value of key {key}? Put the value in \\boxed{{}}.",
    "hop": ("Starting from key {key}, follow the chain of links until a key's value is in double quotes. Put that "
            "value in \\boxed{{}}."),
}


class ReadingParams(TrajectoryParams, LengthParams):
    n_per_level: int = Field(64, ge=0, description="rows per level (needle, one_hop, two_hop)")
    target_tokens: int = Field(1024, ge=256, le=1 << 20, description="prompt length target; the prompt lands in "
                               "[target - 2%, target]")
    key_format: Literal["hex8", "uuid32"] = Field("hex8", description="keys: 8 lowercase hex digits or KeyChain's 32")
    distractor_chains: int = Field(0, ge=0, le=16, description="other chains of the same level in each context, "
                                   "resolving to other values (0: only the queried chain)")
    answer: Literal["direct", "trace"] = Field("direct", description="direct: the boxed value alone (the tiny "
                                               "profile samples 48 tokens); trace: each link followed, then the box")
    max_draws_per_item: int = Field(2000, ge=10, description="bound on documents drawn for one context")


class ReadingBuilder:
    def __init__(self, params: ReadingParams, tok: Any, inputs: Mapping[str, Artifact], partition: str) -> None:
        self.p, self.partition = params, partition
        self.pool = base_pool("world", inputs)
        self.counter = TokenCounter(tok)
        self.filler = BudgetFiller(self.counter, self.pool, params.target_tokens, PASSAGE_HEADER,
                                   seed_for(params.seed, STAGE, "probe", 0))
        self.prefix, self.suffix = chat_frame(tok)

    def build(self, index: int, level: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """(messages, verify_input) of one row, or :class:`Reject`."""
        rng = rng_for(self.p.seed, STAGE, self.partition, index)
        hops, n_chains = LEVELS[level], 1 + self.p.distractor_chains
        keys = make_keys(rng, self.p.key_format, hops * n_chains, "")
        chains = [keys[c * hops : (c + 1) * hops] for c in range(n_chains)]
        values = [f"{a} {n}" for a, n in rng.sample([(a, n) for a in ADJECTIVES for n in NOUNS], n_chains)]
        links = [s for chain, v in zip(chains, values, strict=True) for s in link_statements(chain, v)]
        rng.shuffle(links)
        head = self.prefix + INSTRUCTION
        tail = "\n\n" + QUESTION["needle" if hops == 1 else "hop"].format(key=chains[0][0]) + self.suffix
        fixed = sum(self.counter.many([head, tail])) + insert_cost(self.counter, links)
        used: set[int] = set()

        def draw(k: int) -> list[int]:
            picked = [i for i in (rng.randrange(len(self.pool)) for _ in range(k)) if i not in used]
            used.update(picked)
            return list(dict.fromkeys(picked))

        blocks = self.filler.fill(draw, fixed, 0, self.p.max_draws_per_item)
        if len(blocks) < 2:
            raise Reject("target_too_small_for_documents")
        for link in links:  # the last block is the filler: finalize may still resize it
            host = rng.choice(blocks[:-1])
            host.inserts.append((rng.choice(boundaries(host.body)), link))

        def render() -> str:
            return head + "".join(PASSAGE_HEADER.format(i=i + 1) + b.render() for i, b in enumerate(blocks)) + tail

        text, tokens = self.filler.finalize(render, blocks[-1], self.p.max_adjust_steps)
        content = text[len(self.prefix) : len(text) - len(self.suffix)]
        chain, value = chains[0], values[0]
        if resolve(content, self.p.key_format) != (chain, value) or content.count(value) != 1:
            raise Reject("link_or_value_also_in_documents")
        steps = [*chain_steps(chain), f'{chain[-1]} holds the value "{value}".']
        reply = f"\\boxed{{{value}}}" if self.p.answer == "direct" else answer_text(steps, value)
        verify_input = {"answer": value, "aliases": [], "conditions": chain if self.p.answer == "trace" else [],
                        "limits": self.p.limits(), "level": level, "chain": chain, "key_format": self.p.key_format,
                        "prompt_tokens": tokens, "target_tokens": self.p.target_tokens}
        return [{"role": "user", "content": content}, {"role": "assistant", "content": reply}], verify_input


def resolve(content: str, key_format: str) -> tuple[list[str], str] | None:
    """Follow the links of a prompt from the key its question names: (keys followed, the quoted value), or None
    when a key is stated twice, the chain breaks or loops."""
    passages, _, question = content.rpartition("\n\n")
    found = re.search(KEY_FORMATS[key_format][2], question)
    links: dict[str, str] = {}
    for m in link_pattern(key_format).finditer(passages):
        if m.group(1) in links:
            return None
        links[m.group(1)] = m.group(2) if m.group(2) is not None else m.group(3)
    if found is None:
        return None
    chain, key = [], found.group(0)
    while key in links and key not in chain:
        chain.append(key)
        value = links[key]
        if value not in links:
            return chain, value
        key = value
    return None


def _facts(frame: pl.DataFrame) -> list[tuple[str, dict[str, Any]]]:
    return [(json.loads(r["messages"])[0]["content"], json.loads(r["verify_input"])) for r in frame.iter_rows(named=True)]


def _unresolved(frame: pl.DataFrame) -> list[bool]:
    return [resolve(text, vi["key_format"]) != (vi["chain"], vi["answer"]) for text, vi in _facts(frame)]


def _answer_not_once(frame: pl.DataFrame) -> list[bool]:
    return [text.count(vi["answer"]) != 1 for text, vi in _facts(frame)]


def _mislabelled(frame: pl.DataFrame) -> list[bool]:
    return [vi.get("level") != d or len(vi["chain"]) != LEVELS.get(d, -1)
            for (_, vi), d in zip(_facts(frame), frame["domain"], strict=True)]


def _prompt_outside(frame: pl.DataFrame) -> list[bool]:
    out = []
    for _, vi in _facts(frame):
        lo, hi = length_window(vi["target_tokens"])
        out.append(not lo <= vi["prompt_tokens"] <= hi)
    return out


def _passage_cut(frame: pl.DataFrame) -> list[bool]:
    return [cut_mid_sentence(passages(text), link_pattern(vi["key_format"])) for text, vi in _facts(frame)]


READING_CHECKS = (
    Check("chain_resolves", _unresolved, description="following the links from the question's key reaches the answer "
                                                     "through the recorded chain; every key is stated once"),
    Check("answer_once", _answer_not_once, description="the answer occurs exactly once in the prompt"),
    Check("level_labelled", _mislabelled, description="domain is the level, and the chain has the level's keys"),
    Check("prompt_within_window", _prompt_outside, description="prompt tokens in [target - 2%, target]"),
    Check(PASSAGES_WHOLE.name, _passage_cut, description=PASSAGES_WHOLE.description),
)


# 2: no sliver of room left for a last block (token_budget.MIN_BODY_TOKENS); 3: passages end at sentence ends
@stage(name=STAGE, version="3", inputs=("world", "tokenizer"), params=ReadingParams,
       outputs={"trajectories": trajectory_contract([STAGE], checks=READING_CHECKS),
                REJECTED: ITEM_REJECTED.contract()})
def reading_curriculum(inputs: Mapping[str, Artifact], params: ReadingParams, partition: str) -> dict[str, pl.DataFrame]:
    """Needle, one-hop and two-hop reading rows at ~1K tokens, answered in \\boxed{}."""
    builder = ReadingBuilder(params, resolve_tokenizer(params.tokenizer, inputs), inputs, partition)
    count = token_counter(params, inputs)
    rows, rejected = [], []
    plan = [level for level in LEVELS for _ in range(params.n_per_level)]
    for index, level in enumerate(plan):
        item_id = f"{STAGE}:{level}:{index:06d}"
        try:
            messages, verify_input = builder.build(index, level)
        except Reject as reason:
            rejected.append({"id": item_id, "reason": str(reason)})
            continue
        row, reason = answer_row(id=item_id, source=STAGE, messages=messages, verify_input=verify_input,
                                 params=params, count=count, domain=level)
        if row is None:
            rejected.append({"id": item_id, "reason": reason})
        else:
            rows.append(row)
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected)}

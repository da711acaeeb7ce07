"""Stage `needles`: RULER-style needle retrieval at the KeyChain length (LoongRL section 3.2.2, Table 1).

LoongRL keeps retrieval alive with 1,024 needle examples built as RULER builds them on a 16K-token book: multi-key
(20 keys with one value each, one of them queried; 512 examples) and multi-value (one key with 20 values, all of
them asked for; 512 examples). The haystack here is the `world` documents (or any local text directory) read as
consecutive paragraphs from a random starting point; needles go to sentence boundaries at uniformly random depths.
Length follows the KeyChain rules (``tasks/longctx/token_budget.py``): the final prompt, chat template applied, lands in
[target - 2%, target]. ``answers`` lists every value the reward requires (``needle_all`` in ``envgen/rewards.py``);
``answer`` holds the same list as a JSON string, the form the mixture's shared ``answer`` column carries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import at_most, in_set
from data_contracts.stage import REJECTED, Artifact, Check, rng_for, seed_for, stage
from inference.tokenizer import identity
from tasks.longctx.records import NEEDLE
from tasks.longctx.token_budget import (
    LENGTH_CHECK,
    BudgetFiller,
    DocPool,
    Reject,
    TokenCounter,
    boundaries,
    chat_frame,
    insert_cost,
)
from tasks.readers import TEXT_SUFFIXES, text_files
from tasks.records import ITEM_REJECTED
from tasks.tokenizer import LengthParams, keyword_or_dir, resolve_tokenizer

STAGE = "needles"
TASKS = ("multikey", "multivalue")
# RULER's needle and query templates (Hsieh et al., 2024), with LoongRL's \boxed{} answer format.
INTRO = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz "
         "you about the numbers afterwards.")
NEEDLE_SENTENCE = "One of the special magic numbers for {key} is: {value}."
QUERY = {
    "multikey": "What is the special magic number for {key} mentioned in the provided text? Put the number in "
                "\\boxed{{}}.",
    "multivalue": "What are all the special magic numbers for {key} mentioned in the provided text? Put all of them, "
                  "separated by commas, in \\boxed{{}}.",
}
ADJECTIVES = ("abundant", "amber", "ancient", "brave", "bright", "calm", "clever", "crisp", "curious", "eager",
              "faint", "fierce", "gentle", "giant", "golden", "hollow", "humble", "icy", "jolly", "keen", "lively",
              "lofty", "loyal", "mellow", "misty", "noble", "pale", "proud", "quick", "quiet", "rapid", "rough",
              "royal", "rustic", "scarlet", "shiny", "silent", "sleek", "smooth", "solid", "steep", "sturdy", "swift",
              "tidy", "vast", "vivid", "warm", "wild", "witty", "zesty")
NOUNS = ("anchor", "apple", "arrow", "badge", "barrel", "beacon", "blanket", "bottle", "bridge", "candle", "canyon",
         "castle", "cellar", "chimney", "compass", "copper", "cradle", "crystal", "dagger", "engine", "falcon",
         "feather", "fiddle", "garden", "glacier", "hammer", "harbor", "helmet", "island", "jacket", "kettle",
         "ladder", "lantern", "meadow", "mirror", "needle", "orchard", "paddle", "parrot", "pebble", "pillow",
         "pocket", "quarry", "ribbon", "saddle", "sailor", "shelter", "spindle", "tablet", "thimble", "timber",
         "tunnel", "velvet", "wagon", "walnut", "window")


class NeedleParams(LengthParams):
    seed: int = Field(0, description="base seed; example i draws from rng_for(seed, 'needles', partition, i)")
    base: str = Field("world", description="'world' (the world documents) or a local directory of .txt/.md files, "
                                           "split into paragraphs at blank lines")
    n_multikey: int = Field(512, ge=0, description="multi-key examples (LoongRL Table 1: 512)")
    n_multivalue: int = Field(512, ge=0, description="multi-value examples (LoongRL Table 1: 512)")
    n_keys: int = Field(20, ge=1, le=200, description="multi-key: keys hidden, each with one value; one is queried")
    n_values: int = Field(20, ge=1, le=200, description="multi-value: values hidden for the one key, all required")
    key_type: Literal["words", "numbers"] = Field("words", description="keys as adjective-noun words or 7 digits")

    @field_validator("base")
    @classmethod
    def _base(cls, v: str) -> str:
        return keyword_or_dir("base", v, "world", "the world documents")

    def local_inputs(self) -> list[str]:
        return super().local_inputs() + ([] if self.base == "world" else [self.base])


def base_pool(base: str, inputs: Mapping[str, Artifact]) -> DocPool:
    """The haystack as consecutive paragraphs: world documents in doc_id order, or text files' paragraphs."""
    if base == "world":
        docs = inputs["world"].read("documents").sort("doc_id").select("title", "text")
        return DocPool([""] * docs.height, [f"{t}. {x.strip()}" for t, x in docs.iter_rows()], "world")
    paragraphs = []
    for path in text_files(base):
        text = path.read_text(encoding="utf-8", errors="replace")
        paragraphs += [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    if not paragraphs:
        raise ValueError(f"base directory {base} holds no non-empty {'/'.join(TEXT_SUFFIXES)} paragraphs")
    return DocPool([""] * len(paragraphs), paragraphs, base)


class NeedleBuilder:
    def __init__(self, params: NeedleParams, tok: Any, pool: DocPool, partition: str) -> None:
        self.p, self.pool, self.partition = params, pool, partition
        self.counter = TokenCounter(tok)
        self.filler = BudgetFiller(self.counter, pool, params.target_tokens, "\n\n",
                                   seed_for(params.seed, STAGE, "probe", 0))
        self.prefix, self.suffix = chat_frame(tok)
        self.head = self.prefix + INTRO
        self.head_tokens = self.counter.many([self.head])[0]
        self.tokenizer_id = identity(tok)

    def _keys(self, rng: Any, n: int) -> list[str]:
        """``n`` distinct keys of the configured type (bounded redraws)."""
        keys: dict[str, None] = {}
        for _ in range(50 * n + 50):
            if len(keys) == n:
                return list(keys)
            key = (f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}" if self.p.key_type == "words"
                   else str(rng.randrange(1_000_000, 10_000_000)))
            keys[key] = None
        raise Reject("could_not_draw_distinct_keys")

    def build(self, index: int, task: str) -> dict[str, Any]:
        rng = rng_for(self.p.seed, STAGE, self.partition, index)
        if task == "multikey":
            keys = self._keys(rng, self.p.n_keys)
            values = rng.sample(range(1_000_000, 10_000_000), len(keys))
            pairs = [(k, str(v)) for k, v in zip(keys, values, strict=True)]
            query = rng.choice(keys)
            answers = [v for k, v in pairs if k == query]
        else:
            query = self._keys(rng, 1)[0]
            answers = [str(v) for v in rng.sample(range(1_000_000, 10_000_000), self.p.n_values)]
            pairs = [(query, v) for v in answers]
        needles = [NEEDLE_SENTENCE.format(key=k, value=v) for k, v in pairs]
        tail = "\n\n" + QUERY[task].format(key=query) + self.suffix
        fixed = self.head_tokens + self.counter.many([tail])[0] + insert_cost(self.counter, needles)

        start, taken = rng.randrange(len(self.pool)), 0

        def draw(k: int) -> list[int]:  # consecutive paragraphs, wrapping once around the haystack
            nonlocal taken
            picked = [(start + taken + j) % len(self.pool) for j in range(min(k, len(self.pool) - taken))]
            taken += len(picked)
            return picked

        blocks = self.filler.fill(draw, fixed, 0, 4 * len(self.pool))
        if len(blocks) < 2:
            raise Reject("target_too_small_for_haystack")
        hosts = blocks[:-1]  # the last block is the filler: finalize may still resize it
        for needle in needles:
            host = rng.choice(hosts)
            host.inserts.append((rng.choice(boundaries(host.body)), needle))

        def render() -> str:
            return self.head + "".join("\n\n" + b.render() for b in blocks) + tail

        text, tokens = self.filler.finalize(render, blocks[-1], self.p.max_adjust_steps)
        content = text[len(self.prefix) : len(text) - len(self.suffix)]
        if not needles_stated(content, task, query, answers, [k for k, _ in pairs]):
            raise Reject("needle_value_also_in_haystack")  # a drawn number happens to occur in the base text
        return {
            "id": f"needle-{task}-{index:06d}",
            "task": task,
            "prompt": json.dumps([{"role": "user", "content": content}], ensure_ascii=False),
            "query_key": query,
            "answer": json.dumps(answers),
            "answers": answers,
            "needles": [k for k, _ in pairs],
            "n_needles": len(needles),
            "key_type": self.p.key_type,
            "target_tokens": self.p.target_tokens,
            "tokens": tokens,
            "tokenizer": self.tokenizer_id,
            "base": self.pool.source,
        }


def needles_stated(text: str, task: str, query: str, answers: list[str], keys: list[str]) -> bool:
    """Every required value is stated exactly once, in its needle sentence for the queried key, and nowhere else;
    a multi-key example states each key once."""
    ok = bool(answers) and all(
        text.count(NEEDLE_SENTENCE.format(key=query, value=v)) == 1 and text.count(v) == 1 for v in answers)
    if task == "multikey":
        ok = ok and all(text.count(f"for {k} is: ") == 1 for k in keys)
    return ok


def _needles_missing(frame: pl.DataFrame) -> list[bool]:
    return [not needles_stated(json.loads(r["prompt"])[0]["content"], r["task"], r["query_key"], r["answers"],
                               r["needles"]) for r in frame.iter_rows(named=True)]


NEEDLE_CONTRACT = NEEDLE.contract(
    expectations=(in_set("task", list(TASKS)), at_most("tokens", "target_tokens")),
    checks=(
        Check("needles_present", _needles_missing, description="each required value appears once, as stated"),
        LENGTH_CHECK,
    ),
)


@stage(
    name=STAGE,
    version="3",  # 2: no sliver of room left for a last block (token_budget.MIN_BODY_TOKENS); 3: whole sentences
    inputs=("world", "tokenizer"),
    params=NeedleParams,
    outputs={STAGE: NEEDLE_CONTRACT, REJECTED: ITEM_REJECTED.contract()},
)
def needles(inputs: Mapping[str, Artifact], params: NeedleParams, partition: str) -> dict[str, pl.DataFrame]:
    """RULER multi-key and multi-value needles at the KeyChain target length."""
    builder = NeedleBuilder(params, resolve_tokenizer(params.tokenizer, inputs), base_pool(params.base, inputs),
                            partition)
    plan = ["multikey"] * params.n_multikey + ["multivalue"] * params.n_multivalue
    rows, rejected = [], []
    for index, task in enumerate(plan):
        try:
            rows.append(builder.build(index, task))
        except Reject as reason:
            rejected.append({"id": f"needle-{task}-{index:06d}", "reason": str(reason)})
    return {
        STAGE: NEEDLE.frame(rows),
        REJECTED: ITEM_REJECTED.frame(rejected),
    }

"""Stage `keychain`: LoongRL's KeyChain augmentation (LoongRL section 3.1, "KeyChain Data Construction").

A short multi-hop QA seed (kept by the difficulty filter) becomes a long-context puzzle in five steps:

1. context extension: the seed's own short context is filled up to the target length with distractor documents
   drawn from the short contexts of *filtered-out* seeds (the `rejected` output of `qa_filtered`), never a
   document whose title is one of the item's own documents;
2. gold-document placement: the item's own documents go to uniformly random positions, or around the middle;
3. UUID chains: one target chain of ``hops`` keys whose last value is the original question, plus distractor
   chains resolving to other seeds' questions; linear, unique keys, no cycles; every link ``KEY: VALUE`` is
   inserted at a sentence boundary of a distractor document;
4. the surface question gives only the first key of the target chain;
5. the answer is asked for in ``\\boxed{}``.

Every hidden choice (key format, hops, distractor chains per 1K tokens, placement, target length) is a param and a
column of each row. Length is measured with the configured tokenizer on the final prompt, chat template applied:
document counts are computed once per stage run (shared across items), the prompt is assembled by token budget,
the last distractor is cut at a sentence (or word) boundary to land inside the window, and one exact tokenization
of the final prompt decides; a bounded number of corrections follows, and an item that still does not fit is
rejected with its reason (``tasks/longctx/token_budget.py``).

A second output, `regular`, holds the report's "standard multi-hop QA" of Table 1 from other kept seeds: the same
extension and placement, no chains, the question asked directly (the counterpart of KeyChain in its Table 4).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import polars as pl
from pydantic import Field

from data_contracts.schemas import at_most, between, in_set, matches
from data_contracts.stage import REJECTED, Artifact, Check, rng_for, seed_for, stage
from envgen.rewards import BOXED_INSTRUCTION, normalize
from inference.tokenizer import identity as tokenizer_identity
from tasks.difficulty import ANSWER_OVER_CAP, cap_per_answer
from tasks.longctx.qa_seeds import ANSWER_SHARE, answer_cap, answer_in_support, share_cap
from tasks.longctx.records import KEYCHAIN, PROMPT_REJECTED, REGULAR_QA
from tasks.longctx.token_budget import (
    LENGTH_CHECK,
    Block,
    BudgetFiller,
    DocPool,
    Reject,
    TokenCounter,
    boundaries,
    chat_frame,
    cut_mid_sentence,
    insert_cost,
    length_window,
)
from tasks.tokenizer import LengthParams, resolve_tokenizer

STAGE = "keychain"
KEY_FORMATS: dict[str, tuple[str, int, str]] = {
    # name -> (alphabet, length, full-match regex)
    "uuid32": ("0123456789ABCDEF", 32, r"[0-9A-F]{32}"),  # the report: 32 characters from {0-9, A-F}
    "hex8": ("0123456789abcdef", 8, r"[0-9a-f]{8}"),  # the authors' released code
}
KEY_REGEX = r"^(?:" + "|".join(v[2] for v in KEY_FORMATS.values()) + r")$"


def link_pattern(key_format: str) -> re.Pattern[str]:
    """A link sentence ``KEY: NEXT_KEY`` or ``KEY: "value"`` (groups: key, quoted value, next key)."""
    key = KEY_FORMATS[key_format][2]
    return re.compile(rf'(?<![0-9A-Za-z])({key}): (?:"([^"]*)"|({key})(?![0-9A-Za-z]))')


INSTRUCTION = (
    "Read the passages below. Some sentences in them are links of the form KEY: VALUE, where the value is either "
    "another key or a question in double quotes."
)
# Each question ends with BOXED_INSTRUCTION, where the answer goes.
SURFACE_QUESTION = (
    "Starting from key {key}, follow the chain of links in the passages until a key's value is a question. That is "
    "the hidden question: answer it using the passages. Think step by step."
)
REGULAR_INSTRUCTION = "Read the passages below and answer the question after them."
REGULAR_QUESTION = "Question: {question}\nAnswer the question using the passages. Think step by step."
PASSAGE_HEADER = "\n\nPassage {i}:\n"
_PASSAGE_SPLIT = re.compile(r"\n\nPassage \d+:\n")


class KeyChainParams(LengthParams):
    seed: int = Field(0, description="base seed; item i draws from rng_for(seed, 'keychain', partition, i)")
    n: int = Field(7500, ge=0, description="KeyChain examples to build (LoongRL Table 1: 7,500)")
    n_regular: int = Field(
        7500, ge=0, description="regular long-context QA examples from other kept seeds: same extension and "
        "placement, the question asked directly (LoongRL Table 1: 7,500 standard multi-hop QA)")
    split: str = Field("train", description="only seeds (and distractor documents) of this split are used")
    items_from: Literal["kept", "all"] = Field(
        "kept", description="items from the difficulty filter's kept seeds (training data), or from every seed of "
        "the split, kept and rejected (a held-out set that the reference policy's skill did not choose)")
    key_format: Literal["uuid32", "hex8"] = Field(
        "uuid32", description="uuid32: 32 uppercase hex characters (the report); hex8: 8 lowercase hex (authors' code)"
    )
    hops: int = Field(2, ge=1, le=16, description="keys per chain; the last key's value is the question")
    chains_per_1k: float = Field(
        0.5, ge=0.0, le=8.0, description="distractor chains per 1K target tokens (the report leaves it unspecified)"
    )
    placement: Literal["uniform", "centred"] = Field(
        "uniform", description="gold documents at uniformly random positions, or within the middle third"
    )
    min_pool_docs: int = Field(
        200, ge=1, description="below this many filtered-out documents, other kept seeds' documents join the pool"
    )
    max_draws_per_item: int = Field(20_000, ge=10, description="bound on distractor documents drawn for one item")
    pool_counting: Literal["auto", "lazy", "upfront"] = Field(
        "auto", description="count distractor documents when first drawn (lazy), all at once in parallel batches "
        "before building (upfront), or upfront when the run will draw at least as many documents as the pool holds")

    @property
    def n_distractor_chains(self) -> int:
        return round(self.chains_per_1k * self.target_tokens / 1000)

    @property
    def window(self) -> tuple[int, int]:
        return length_window(self.target_tokens)


# --------------------------------------------------------------------------- pools


_DOC_DTYPE = pl.List(pl.Struct({"title": pl.String, "text": pl.String, "is_supporting": pl.Boolean}))


def _explode_docs(seeds: pl.DataFrame, chunk: int = 8192) -> pl.DataFrame:
    """(title, text) of every document of the seeds, deduplicated; decoded in chunks of seeds to bound memory."""
    parts = [
        seeds.slice(start, chunk).select(pl.col("docs").str.json_decode(_DOC_DTYPE)).explode("docs").unnest("docs")
        .select("title", "text").drop_nulls()
        for start in range(0, seeds.height, chunk)
    ]
    if not parts:
        return pl.DataFrame(schema={"title": pl.String, "text": pl.String})
    return pl.concat(parts).unique(maintain_order=True)


def build_pool(rejected: pl.DataFrame, kept: pl.DataFrame, min_docs: int) -> DocPool:
    """Distractors from filtered-out seeds (LoongRL section 3.1, stage 3); kept seeds' documents join only when
    the filtered-out ones are fewer than ``min_docs``."""
    docs, source = _explode_docs(rejected), "rejected"
    if docs.height < min_docs:
        docs, source = pl.concat([docs, _explode_docs(kept)]).unique(maintain_order=True), "rejected+kept"
    return DocPool(docs["title"].to_list(), docs["text"].to_list(), source)


# --------------------------------------------------------------------------- one example


def make_keys(rng: Any, key_format: str, n: int, avoid: str) -> list[str]:
    """``n`` distinct keys of the format, none occurring in ``avoid`` (the seed texts); bounded redraws."""
    alphabet, length, _ = KEY_FORMATS[key_format]
    keys: list[str] = []
    seen: set[str] = set()
    for _ in range(100 * n + 100):
        if len(keys) == n:
            return keys
        key = "".join(rng.choices(alphabet, k=length))
        if key not in seen and key not in avoid:
            seen.add(key)
            keys.append(key)
    raise Reject("could not draw distinct keys")


def link_statements(keys: Sequence[str], question: str) -> list[str]:
    """A linear chain: key_i -> key_{i+1}, last key -> the question in double quotes."""
    values = [*keys[1:], f'"{question}"']
    return [f"{k}: {v}" for k, v in zip(keys, values, strict=True)]


def centred_window(n_own: int, n_total: int) -> range:
    """The middle third of the context, widened to hold every own document when the context is short."""
    width = max(n_own, n_total - 2 * (n_total // 3))
    start = (n_total - width) // 2
    return range(start, start + width)


def place_own(rng: Any, n_own: int, n_total: int, placement: str) -> list[int]:
    """Positions (sorted) of the item's own documents among ``n_total`` (LoongRL section 3.1: gold placement)."""
    window = centred_window(n_own, n_total) if placement == "centred" else range(n_total)
    return sorted(rng.sample(window, n_own))


class KeyChainBuilder:
    """Builds KeyChain examples from one stage run's seeds, pools and tokenizer; :meth:`build` is per item."""

    def __init__(self, params: KeyChainParams, tok: Any, pool: DocPool, questions: pl.DataFrame, partition: str):
        self.p, self.pool, self.partition = params, pool, partition
        self.counter = TokenCounter(tok)
        self.filler = BudgetFiller(self.counter, pool, params.target_tokens, PASSAGE_HEADER,
                                   seed_for(params.seed, STAGE, "probe", 0))
        expected_draws = (params.n + params.n_regular) * params.target_tokens / self.filler.mean_tokens
        if params.pool_counting == "upfront" or (params.pool_counting == "auto" and expected_draws >= len(pool)):
            pool.count_all(self.counter)
        self.q_ids: list[str] = questions["id"].to_list()
        self.q_texts: list[str] = questions["question"].to_list()
        self.tokenizer_id = tokenizer_identity(tok)
        self.prefix, self.suffix = chat_frame(tok)

    def build(self, index: int, seed: Mapping[str, Any]) -> dict[str, Any]:
        """One KeyChain example, or :class:`Reject` with the reason."""
        rng = rng_for(self.p.seed, STAGE, self.partition, index)
        own = self._own_blocks(seed)
        question = seed["question"].strip()

        # stage 3: a target chain resolving to the question, distractor chains to other seeds' questions
        hops, n_chains = self.p.hops, 1 + self.p.n_distractor_chains
        keys = make_keys(rng, self.p.key_format, hops * n_chains, question + " " + " ".join(b.body for b in own))
        chains = [keys[c * hops : (c + 1) * hops] for c in range(n_chains)]
        others = self._distractor_questions(rng, seed["id"], question, n_chains - 1)
        links = [s for chain, q in zip(chains, [question, *(q for _, q in others)], strict=True)
                 for s in link_statements(chain, q)]
        rng.shuffle(links)

        # stage 4 and 5: the surface question names only the first key and asks for \boxed{}
        surface = f"{SURFACE_QUESTION.format(key=chains[0][0])} {BOXED_INSTRUCTION}"
        row = self._assemble(rng, seed, own, INSTRUCTION, surface, links)
        return {
            "id": f"kc-{seed['id']}",
            **row,
            "hidden_question": question,
            "first_key": chains[0][0],
            "chain": chains[0],
            "distractor_chains": json.dumps(
                [{"seed_id": sid, "keys": ch, "question": q} for ch, (sid, q) in zip(chains[1:], others, strict=True)],
                ensure_ascii=False,
            ),
            "key_format": self.p.key_format,
            "hops": hops,
            "n_distractor_chains": n_chains - 1,
            "chains_per_1k": self.p.chains_per_1k,
            "curriculum_stage": None,
        }

    def build_regular(self, index: int, seed: Mapping[str, Any]) -> dict[str, Any]:
        """A regular long-context QA example: KeyChain's context extension and placement, the question asked
        directly (LoongRL Table 1, "standard multi-hop QA"; the Table 4 ablation's counterpart of KeyChain)."""
        rng = rng_for(self.p.seed, STAGE, self.partition, index)
        question = seed["question"].strip()
        row = self._assemble(rng, seed, self._own_blocks(seed), REGULAR_INSTRUCTION,
                             f"{REGULAR_QUESTION.format(question=question)} {BOXED_INSTRUCTION}", [])
        return {"id": f"lq-{seed['id']}", **row, "question": question}

    def _own_blocks(self, seed: Mapping[str, Any]) -> list[Block]:
        """The seed's own short context, kept whole (its supporting documents must hold the answer)."""
        # the contract requires the answer in a supporting document of the context: seeds without it cannot pass
        if not answer_in_support(seed["answer"], seed["aliases"], seed["docs"]):
            raise Reject("answer_not_in_supporting_docs")
        own = [Block(f"{d['title']}\n{d['text'].strip()}", 0, own=True, supporting=bool(d["is_supporting"]))
               for d in json.loads(seed["docs"])]
        for block, count in zip(own, self.counter.many([b.body for b in own]), strict=True):
            block.tokens = count
        return own

    def _assemble(self, rng: Any, seed: Mapping[str, Any], own: list[Block], instruction: str, question: str,
                  links: list[str]) -> dict[str, Any]:
        """Context extension (stage 1), gold placement (stage 2), link insertion (stage 3) and the exact length;
        returns the columns KeyChain and regular examples share."""
        head = self.prefix + instruction
        tail = "\n\n" + question + self.suffix
        fixed = sum(self.counter.many([head, tail])) + insert_cost(self.counter, links) + sum(b.tokens for b in own)

        # distractor documents of other seeds, never one titled like one of the item's own documents
        own_titles = {" ".join(b.body.split("\n", 1)[0].lower().split()) for b in own}
        used: set[int] = set()

        def draw(k: int) -> list[int]:
            picked = []
            for _ in range(k):
                i = rng.randrange(len(self.pool))
                if i not in used and self.pool.title_keys[i] not in own_titles:
                    used.add(i)
                    picked.append(i)
            return picked

        distractors = self.filler.fill(draw, fixed, len(own), self.p.max_draws_per_item)
        if len(distractors) < (2 if links else 1):  # the last (the filler) absorbs corrections, others host links
            raise Reject("target_too_small_for_distractors")
        filler, hosts = distractors[-1], distractors[:-1]

        positions = place_own(rng, len(own), len(own) + len(distractors), self.p.placement)
        blocks = _interleave(own, distractors, positions)
        for link in links:
            host = rng.choice(hosts)
            host.inserts.append((rng.choice(boundaries(host.body)), link))

        def render() -> str:
            return head + "".join(PASSAGE_HEADER.format(i=i + 1) + b.render() for i, b in enumerate(blocks)) + tail

        text, tokens = self.filler.finalize(render, filler, self.p.max_adjust_steps)
        content = text[len(self.prefix) : len(text) - len(self.suffix)]
        return {
            "seed_id": seed["id"],
            "source": seed.get("source"),
            "prompt": json.dumps([{"role": "user", "content": content}], ensure_ascii=False),
            "answer": seed["answer"],
            "aliases": list(seed["aliases"] or []),
            "placement": self.p.placement,
            "target_tokens": self.p.target_tokens,
            "tokens": tokens,
            "tokenizer": self.tokenizer_id,
            "gold_doc_positions": [i for i, b in enumerate(blocks) if b.own and b.supporting],
            "n_docs": len(blocks),
            "distractor_source": self.pool.source,
            "pass_count": seed.get("pass_count"),
            "pass_k": seed.get("pass_k"),
        }

    def _distractor_questions(self, rng: Any, seed_id: str, question: str, n: int) -> list[tuple[str, str]]:
        """Other seeds' questions, distinct, neither containing nor contained in the hidden question."""
        picked: list[tuple[str, str]] = []
        seen = {question}
        for _ in range(50 * n + 50):
            if len(picked) == n:
                return picked
            i = rng.randrange(len(self.q_texts))
            q = self.q_texts[i].strip()
            if self.q_ids[i] == seed_id or q in seen or not q or q in question or question in q or '"' in q:
                continue
            seen.add(q)
            picked.append((self.q_ids[i], q))
        raise Reject("too_few_distinct_distractor_questions")


def _interleave(own: list[Block], distractors: list[Block], positions: list[int]) -> list[Block]:
    blocks: list[Block] = []
    own_iter, dis_iter = iter(own), iter(distractors)
    wanted = set(positions)
    for i in range(len(own) + len(distractors)):
        blocks.append(next(own_iter) if i in wanted else next(dis_iter))
    return blocks


# --------------------------------------------------------------------------- contract checks


def _content(prompt: str) -> str:
    return json.loads(prompt)[-1]["content"]


def _chains(row: Mapping[str, Any]) -> list[tuple[list[str], str]]:
    return [(list(row["chain"]), row["hidden_question"])] + [
        (c["keys"], c["question"]) for c in json.loads(row["distractor_chains"])
    ]


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts()


def _chains_unresolved(frame: pl.DataFrame) -> list[bool]:
    """Every link of every chain is in the prompt, each key is stated exactly once as a key."""
    bad = []
    for row in _rows(frame):
        text = _content(row["prompt"])
        ok = all(
            text.count(f"{k}: ") == 1 and s in text
            for keys, q in _chains(row)
            for k, s in zip(keys, link_statements(keys, q), strict=True)
        )
        bad.append(not ok)
    return bad


def _keys_bad(frame: pl.DataFrame) -> list[bool]:
    """Keys match their format, are unique in the example, and the chain is acyclic and linear: a key occurs once
    as a key and once as the previous link's value (the first key of the target chain: once more, in the surface
    question; distractor first keys: nowhere else)."""
    bad = []
    for row in _rows(frame):
        text = _content(row["prompt"])
        pattern = re.compile(f"^{KEY_FORMATS[row['key_format']][2]}$")
        chains = _chains(row)
        keys = [k for ks, _ in chains for k in ks]
        ok = len(set(keys)) == len(keys) and all(pattern.match(k) for k in keys)
        for c, (ks, _) in enumerate(chains):
            for j, k in enumerate(ks):
                expected = 2 if (j > 0 or c == 0) else 1
                ok = ok and text.count(k) == expected
        bad.append(not ok)
    return bad


def _question_exposed(frame: pl.DataFrame) -> list[bool]:
    """The hidden question occurs exactly once: as the value of the target chain's last link, never in the
    surface question or elsewhere."""
    bad = []
    for row in _rows(frame):
        text = _content(row["prompt"])
        q = row["hidden_question"]
        bad.append(text.count(q) != 1 or f'{row["chain"][-1]}: "{q}"' not in text)
    return bad


def passages(content: str) -> list[str]:
    """The passages of a KeyChain prompt, in order (index = position in ``gold_doc_positions``)."""
    parts = _PASSAGE_SPLIT.split(content)
    last = parts[-1].rsplit("\n\n", 1)[0]  # drop the surface question after the last passage
    return [*parts[1:-1], last]


def _answer_absent(frame: pl.DataFrame) -> list[bool]:
    bad = []
    for row in _rows(frame):
        docs = passages(_content(row["prompt"]))
        support = [{"title": "", "text": docs[i], "is_supporting": True} for i in row["gold_doc_positions"]
                   if i < len(docs)]
        bad.append(not support or not answer_in_support(row["answer"], row["aliases"], json.dumps(support)))
    return bad


def _passage_cut(frame: pl.DataFrame) -> list[bool]:
    # regular QA rows have no links and no key_format: any format's pattern finds nothing to take out
    return [cut_mid_sentence(passages(_content(row["prompt"])), link_pattern(row.get("key_format") or "uuid32"))
            for row in _rows(frame)]


PASSAGES_WHOLE = Check("passages_end_at_sentences", _passage_cut,
                       description="no passage stops mid-sentence (links aside, each ends with . ! or ?)")

KEYCHAIN_CONTRACT = KEYCHAIN.contract(
    expectations=(
        matches("first_key", KEY_REGEX),
        in_set("key_format", list(KEY_FORMATS)),
        in_set("placement", ["uniform", "centred"]),
        at_most("tokens", "target_tokens"),
        between("hops", min_value=1),
    ),
    checks=(
        Check("chains_resolve", _chains_unresolved, description="every link of every chain is stated in the prompt"),
        Check("keys_unique_linear", _keys_bad, description="key format, unique keys, linear acyclic chains"),
        Check("hidden_question_hidden", _question_exposed,
              description="the hidden question appears once, as the target chain's resolution"),
        Check("answer_in_context", _answer_absent,
              description="the answer or an alias is in a supporting document present in the context"),
        PASSAGES_WHOLE,
        LENGTH_CHECK,
        ANSWER_SHARE,
    ),
)

REGULAR = "regular"
REGULAR_CONTRACT = REGULAR_QA.contract(
    expectations=(at_most("tokens", "target_tokens"),),
    checks=tuple(c for c in KEYCHAIN_CONTRACT.checks
                 if c.name in ("answer_in_context", PASSAGES_WHOLE.name, "length_within_window", ANSWER_SHARE.name)),
)


# --------------------------------------------------------------------------- the stage


def select_items(kept: pl.DataFrame, params: KeyChainParams) -> pl.DataFrame:
    """In the order of a seeded hash of their ids (stable under input reordering), ``n`` seeds become KeyChain
    items, the next ``n_regular`` regular long-context QA items: no seed is used twice, and a seed whose answer
    already answers its share of a kind's items (``answer_cap``) waits for the next kind."""
    order = [hashlib.blake2b(f"{params.seed}/{i}".encode(), digest_size=8).hexdigest() for i in kept["id"]]
    ordered = kept.with_columns(pl.Series("_order", order)).sort("_order").drop("_order")
    waiting = list(zip(range(ordered.height), map(normalize, ordered["answer"]), strict=True))
    rows, kinds = [], []
    for kind, n in (("keychain", params.n), (REGULAR, params.n_regular)):
        answered: Counter[str] = Counter()
        chosen = []
        for row, answer in waiting:
            if len(chosen) < n and answered[answer] < answer_cap(n):
                chosen.append((row, answer))
                answered[answer] += 1
        taken = {row for row, _ in chosen}
        rows += [row for row, _ in chosen]
        kinds += [kind] * len(chosen)
        waiting = [item for item in waiting if item[0] not in taken]
    return ordered[rows].with_columns(pl.Series("kind", kinds, dtype=pl.String))


def prepare(inputs: Mapping[str, Artifact], params: KeyChainParams) -> tuple[pl.DataFrame, DocPool, pl.DataFrame]:
    """The items to build, the distractor document pool and the distractor question pool of one run; only seeds
    of the configured split take part, so no evaluation seed leaks into a training context."""
    frames = {}
    for output in ("seeds", REJECTED):
        frame = inputs["qa_filtered"].read(output)
        missing = {"id", "question", "docs", "split"} - set(frame.columns)
        if missing:
            raise ValueError(f"keychain: qa_filtered output {output!r} lacks columns {sorted(missing)}")
        frames[output] = frame.filter(pl.col("split") == params.split)
    kept, rejected = frames["seeds"], frames[REJECTED]
    pool = build_pool(rejected, kept, params.min_pool_docs)
    questions = pl.concat([kept.select("id", "question"), rejected.select("id", "question")])
    sources = kept if params.items_from == "kept" else pl.concat([kept, rejected.drop("reason")], how="diagonal_relaxed")
    return select_items(sources, params), pool, questions


def build_frames(builder: KeyChainBuilder, items: pl.DataFrame, start: int = 0) -> dict[str, pl.DataFrame]:
    """Build every item (its global index seeds its RNG); failures go to `rejected` with their reason."""
    built: dict[str, list[dict[str, Any]]] = {"keychain": [], "regular": []}
    rejected = []
    for index, seed in enumerate(items.iter_rows(named=True), start=start):
        kind = seed.get("kind", "keychain")
        try:
            built[kind].append(builder.build(index, seed) if kind == "keychain" else builder.build_regular(index, seed))
        except Reject as reason:
            rejected.append({"seed_id": seed["id"], "kind": kind, "reason": str(reason)})
    frames = {STAGE: KEYCHAIN.frame(built["keychain"]), REGULAR: REGULAR_QA.frame(built["regular"])}
    # Items that failed to build shrink the total the answer share is taken of: trim to it again.
    for kind, frame in frames.items():
        cap = share_cap(Counter(map(normalize, frame["answer"])).values())
        frames[kind], over = cap_per_answer(frame, frame.clear(), cap)
        rejected += [{"seed_id": sid, "kind": kind, "reason": ANSWER_OVER_CAP} for sid in over["seed_id"]]
    return {**frames, REJECTED: PROMPT_REJECTED.frame(rejected)}


@stage(
    name=STAGE,
    # 2: no sliver of room left for a last block (token_budget.MIN_BODY_TOKENS); 3: whole sentences; 4: no answer
    # over 5% of a kind's items (answer_share); 5: the answer's place worded as every prompt words it
    # (BOXED_INSTRUCTION)
    version="5",
    inputs=("qa_filtered", "tokenizer"),
    params=KeyChainParams,
    outputs={STAGE: KEYCHAIN_CONTRACT, REGULAR: REGULAR_CONTRACT, REJECTED: PROMPT_REJECTED.contract()},
)
def keychain(inputs: Mapping[str, Artifact], params: KeyChainParams, partition: str) -> dict[str, pl.DataFrame]:
    """KeyChain long-context QA (LoongRL section 3.1): hidden question behind UUID chains among distractors."""
    items, pool, questions = prepare(inputs, params)
    if len(pool) == 0:
        raise ValueError("keychain: no distractor documents (qa_filtered has no seeds with docs in this split)")
    builder = KeyChainBuilder(params, resolve_tokenizer(params.tokenizer, inputs), pool, questions, partition)
    return build_frames(builder, items)


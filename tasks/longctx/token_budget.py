"""Assembling long prompts to an exact token budget (shared by `keychain` and `needles`).

The rules of DESIGN.md section 7: count with the target tokenizer on the final assembled prompt (chat template
applied); count each document once per stage run (the pool is shared by all items); bound every retry loop. A
prompt is built from blocks (documents or paragraphs) whose counts are cached, whole blocks are added while they
fit under a goal inside the window, the first block whose text can end at a sentence end inside the remaining budget
is cut there (a reader never meets a document that stops mid-sentence), and one exact tokenization of the final
prompt decides. If a tokenizer is not additive at block boundaries the estimate can miss; the cut block (the
"filler") is then resized a bounded number of times.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from data_contracts.stage import Check

LENGTH_TOLERANCE = 0.02  # a prompt lands in [target - 2%, target] (issue 3)
_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)\s+")  # "Matthew X. Dillon" is one sentence
_CLOSED = re.compile(r"(?<!\b[A-Z])[.!?][\"')\]]*$")
_SENTINEL = "\x00GYMFORGE-CONTENT\x00"


class Reject(Exception):
    """An item that cannot be built; the message is the reason recorded in the stage's `rejected` output."""


def length_window(target: int) -> tuple[int, int]:
    return math.ceil(target * (1 - LENGTH_TOLERANCE)), target


def _length_outside(frame: pl.DataFrame) -> pl.Series:
    lower = (frame["target_tokens"] * (1 - LENGTH_TOLERANCE)).ceil().cast(pl.Int64)
    return (frame["tokens"] > frame["target_tokens"]) | (frame["tokens"] < lower)


LENGTH_CHECK = Check("length_within_window", _length_outside, description="tokens in [target - 2%, target]")
"""The contract check of every output with ``tokens`` and ``target_tokens`` columns."""


def boundaries(text: str) -> list[int]:
    """Sentence boundaries of a text: the start of each sentence after the first, and the end of the text."""
    return [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]


def cut_mid_sentence(passages: Sequence[str], inserted: re.Pattern[str]) -> bool:
    """Whether a passage ends inside a sentence once the sentences a stage inserted (``inserted``: links, needles)
    are taken out: a document that stops mid-thought."""
    return any(not _CLOSED.search(inserted.sub("", p).rstrip()) for p in passages)


def chat_frame(tok: Any) -> tuple[str, str]:
    """The chat-template text before and after a single user message, so a prompt is prefix + content + suffix
    (rendering a 16K-token content through Jinja once per correction step would be wasted work)."""
    rendered = tok.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False,
                                       add_generation_prompt=True)
    if rendered.count(_SENTINEL) != 1:
        raise ValueError("the chat template does not render the user content verbatim; cannot assemble prompts")
    prefix, suffix = rendered.split(_SENTINEL)
    return prefix, suffix


class TokenCounter:
    """Token counts with the configured tokenizer: batched (the fast backend when there is one), no special tokens
    added (the chat template already wrote them)."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self._backend = tok.backend_tokenizer if getattr(tok, "is_fast", False) else None
        self.exact_counts = 0  # full tokenizations of final prompts (one per item when estimates hold)

    def many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if self._backend is not None:
            return [len(e) for e in self._backend.encode_batch_fast(list(texts), add_special_tokens=False)]
        return [len(ids) for ids in self.tok(list(texts), add_special_tokens=False)["input_ids"]]

    def exact(self, text: str) -> int:
        """The count of a final prompt: the one full tokenization per item."""
        self.exact_counts += 1
        return len(self.tok(text, add_special_tokens=False)["input_ids"])

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return self.tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]


@dataclass
class DocPool:
    """Documents (a title, possibly empty, and a text), with token counts computed lazily, once per run."""

    titles: list[str]
    texts: list[str]
    source: str
    counts: np.ndarray = field(init=False)
    title_keys: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = np.full(len(self.texts), -1, dtype=np.int64)
        self.title_keys = [" ".join(t.lower().split()) for t in self.titles]

    def __len__(self) -> int:
        return len(self.texts)

    def body(self, i: int) -> str:
        title, text = self.titles[i], self.texts[i].strip()
        return f"{title}\n{text}" if title else text

    def count_all(self, counter: TokenCounter, batch: int = 8192) -> None:
        """Count every document not counted yet, in large batches (the tokenizer parallelizes a batch)."""
        missing = np.flatnonzero(self.counts < 0).tolist()
        for start in range(0, len(missing), batch):
            self.count(missing[start : start + batch], counter)

    def count(self, idx: Sequence[int], counter: TokenCounter) -> list[int]:
        missing = [i for i in dict.fromkeys(idx) if self.counts[i] < 0]
        if missing:
            self.counts[missing] = counter.many([self.body(i) for i in missing])
        return self.counts[list(idx)].tolist()


@dataclass
class Block:
    """One document of a prompt; ``inserts`` are sentences placed at character positions (chain links, needles)."""

    body: str
    tokens: int
    pool_index: int = -1
    own: bool = False
    supporting: bool = False
    inserts: list[tuple[int, str]] = field(default_factory=list)

    def render(self) -> str:
        text = self.body
        for pos, sentence in sorted(self.inserts, key=lambda p: p[0], reverse=True):
            text = f"{text[:pos]}{sentence} {text[pos:]}" if pos < len(text) else f"{text} {sentence}"
        return text


def insert_cost(counter: TokenCounter, sentences: Sequence[str]) -> int:
    """Tokens a set of sentences adds when inserted at sentence boundaries (each becomes " sentence")."""
    return sum(counter.many([" " + s for s in sentences]))


MIN_BODY_TOKENS = 16
"""The least text a block may hold: a filler never leaves a smaller room for the last block."""


class BudgetFiller:
    """Fills a prompt with pool blocks up to a token goal inside the length window, and corrects the final count.

    ``header`` is the text before each block (``"\\n\\nPassage {i}:\\n"`` or ``"\\n\\n"``); its count is part of
    the budget."""

    def __init__(self, counter: TokenCounter, pool: DocPool, target: int, header: str, seed: int) -> None:
        self.counter, self.pool, self.header = counter, pool, header
        self.lo, self.hi = length_window(target)
        # Aim below the top of the window so a small estimate error never overshoots; anything from the bottom of
        # the window up to the goal is accepted.
        self.goal = self.hi - (self.hi - self.lo) // 4
        self.tolerance = (self.goal - self.lo) * 2 // 3  # the accepted band [goal - tolerance, goal] keeps a third
        # of the room below it, so an estimate a few tokens short still lands in the window
        self._headers: list[int] = [0]
        # A fixed, seeded probe sets the batch size of draws, so an item's draws never depend on which documents
        # earlier items happened to count (results stay independent of item order).
        probe = random.Random(seed).sample(range(len(pool)), min(256, len(pool)))
        self.mean_tokens = max(1.0, float(np.mean(pool.count(probe, counter)))) if probe else 1.0

    def headers(self, k: int) -> int:
        """Tokens of the first ``k`` block headers together (prefix sums, extended on demand)."""
        if k >= len(self._headers):
            start = len(self._headers)
            for c in self.counter.many([self.header.format(i=i) for i in range(start, 2 * k + 16)]):
                self._headers.append(self._headers[-1] + c)
        return self._headers[k]

    def fill(self, draw: Callable[[int], list[int]], fixed: int, n_fixed: int, max_draws: int) -> list[Block]:
        """Whole blocks from ``draw(k)`` (up to k new pool indices) while they fit; the first that does not is cut
        to the remaining budget and ends the list. ``fixed`` tokens and ``n_fixed`` blocks are already spent."""
        if fixed + self.headers(n_fixed) > self.hi:
            raise Reject("own_context_exceeds_target")
        chosen: list[Block] = []
        spent = draws = 0
        while draws < max_draws:
            room = self.goal - fixed - self.headers(n_fixed + len(chosen) + 1) - spent
            want = min(max(4, math.ceil(room / self.mean_tokens) + 2), max_draws - draws)
            draws += want
            batch = draw(want)
            for i, count in zip(batch, self.pool.count(batch, self.counter), strict=True):
                gap = self.goal - fixed - self.headers(n_fixed + len(chosen)) - spent
                room = self.goal - fixed - self.headers(n_fixed + len(chosen) + 1) - spent  # after the next header
                if gap <= self.tolerance or room <= 0:
                    return chosen
                block = Block(self.pool.body(i), count, pool_index=i)
                # a whole block that would leave room for a header and only a sliver of text (a few tokens, which no
                # document's first words fit) is cut to end the list instead
                sliver = 0 < room - count - (self.headers(n_fixed + len(chosen) + 2)
                                             - self.headers(n_fixed + len(chosen) + 1)) < MIN_BODY_TOKENS
                if (count <= room and not sliver) or self.resize(block, room):
                    chosen.append(block)
                    spent += block.tokens
                    if room - block.tokens <= self.tolerance:
                        return chosen
        raise Reject("pool_exhausted")

    def resize(self, block: Block, tokens: int) -> bool:
        """Cut the block's full text to at most ``tokens`` tokens and at least ``tokens - tolerance``, at a sentence
        end; False when no sentence of this document ends inside that band (the caller tries another document)."""
        full = self.pool.body(block.pool_index)
        full_count = int(self.pool.counts[block.pool_index])
        if tokens <= 0:
            return False
        if tokens >= full_count:
            block.body, block.tokens = full, full_count
            return tokens - full_count <= self.tolerance
        offsets = self.counter.offsets(full)
        cut_end = offsets[tokens][0]  # first character of the first token that does not fit
        text = full[: max((b for b in boundaries(full[:cut_end]) if b < cut_end), default=0)].rstrip()
        n = sum(1 for start, _end in offsets if start < len(text))
        if not text or not tokens - self.tolerance <= n <= tokens:
            return False
        block.body, block.tokens = text, n
        return True

    def finalize(self, render: Callable[[], str], filler: Block, max_steps: int) -> tuple[str, int]:
        """Render, count exactly, and resize the filler until the count is inside the window (bounded)."""
        for _ in range(max_steps + 1):
            text = render()
            tokens = self.counter.exact(text)
            if self.lo <= tokens <= self.hi:
                return text, tokens
            if not self.resize(filler, filler.tokens + self.goal - tokens):
                raise Reject("length_correction_failed")
        raise Reject(f"length_out_of_bounds_after_{max_steps}_corrections")

"""Sliding-window perplexity under a reference model (LongCat-Flash-Thinking-2601 3.1.2, "General Thinking Data
Selection"): a sample's score is the maximum, over its windows of ``window`` tokens, of the window's mean
perplexity, so one hard passage is not diluted by an easy rest (average perplexity "masks localized hard tokens").

The reference model gives the log-probability of every token of the sequence (prompt log-probabilities), with
each token's character offset so a caller can keep the tokens it trains on (an SFT sample is scored on its assistant
turns, never on the system prompt and tool schemas every sample shares): ``HFScorer`` runs a local transformers
checkpoint directly; ``OpenAIScorer`` asks any OpenAI-compatible server that returns prompt log-probabilities (vLLM's
``prompt_logprobs``, or ``echo`` with ``logprobs`` on ``/v1/completions``); ``BigramReference`` is a language model
fitted on other samples (interpolated absolute-discounting bigram over a tokenizer's ids): trained on one half of
the candidates and scoring the other, it beats the uniform guess (ln V nats per token) that an untrained network
does not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Scorer(Protocol):
    def token_logprobs(self, texts: Sequence[str]) -> list[np.ndarray]:
        """log p(token_i | tokens_<i) for i >= 1 of every text, tokenized by the reference model's own tokenizer
        (the first token has no context)."""
        ...

    def token_logprobs_at(self, texts: Iterable[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(log-probabilities as ``token_logprobs``, the character offset in the text where each of those tokens
        starts), text by text as they are scored: a caller reduces each to its scores and drops it, so no pool's
        every token is held at once."""
        ...

    def close(self) -> None: ...


def window_perplexities(logprobs: np.ndarray, window: int, stride: int) -> np.ndarray:
    """Mean perplexity, exp(-mean logprob), of every ``window``-token window (a sequence shorter than the window
    is one window), windows starting every ``stride`` tokens and the last one ending at the sequence's end."""
    n = len(logprobs)
    if n == 0:
        return np.array([1.0])
    if n <= window:
        return np.array([math.exp(-float(np.mean(logprobs)))])
    sums = np.concatenate([[0.0], np.cumsum(logprobs, dtype=np.float64)])
    starts = np.unique(np.append(np.arange(0, n - window + 1, stride), n - window))
    return np.exp(-(sums[starts + window] - sums[starts]) / window)


def sliding_window_score(logprobs: np.ndarray, window: int = 512, stride: int = 256) -> float:
    """The sample's score: the largest window mean perplexity."""
    return float(window_perplexities(logprobs, window, stride).max())


def mean_perplexity(logprobs: np.ndarray) -> float:
    return math.exp(-float(np.mean(logprobs))) if len(logprobs) else 1.0


class HFScorer:
    """Prompt log-probabilities from a local transformers checkpoint; sequences longer than the model's positions
    are scored in consecutive chunks of that length."""

    def __init__(self, model_dir: str | Path, batch_size: int = 4) -> None:
        from inference.cpu import tune_allocator

        tune_allocator()
        import torch
        from transformers import AutoModelForCausalLM

        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise ValueError(f"{path}: not a transformers checkpoint directory (no config.json)")
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
        self.model.eval()
        from inference.tokenizer import load

        self.tokenizer = load(path)
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 4096))
        self.batch_size = batch_size

    def token_logprobs(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [lp for lp, _ in self.token_logprobs_at(texts)]

    def token_logprobs_at(self, texts: Iterable[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # blocks of texts, sorted by length inside a block to batch similar lengths: only a block's tokens are held
        it = iter(texts)
        while block := list(islice(it, self.batch_size * 16)):
            yield from self._block(block)

    def _block(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        torch = self.torch
        # arrays as soon as each text is encoded: the tokenizer's Python lists cost 150 bytes a token (16 as arrays,
        # bench/RESULTS.md)
        sequences, offsets = [], []
        for text in texts:
            e = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            sequences.append(np.asarray(e["input_ids"], dtype=np.int64))
            offsets.append(np.asarray([start for start, _end in e["offset_mapping"][1:]], dtype=np.int64))
        chunks = [(i, seq[s:s + self.max_positions]) for i, seq in enumerate(sequences)
                  for s in range(0, max(len(seq), 1), self.max_positions)]
        parts: list[list[np.ndarray]] = [[] for _ in sequences]
        order = sorted(range(len(chunks)), key=lambda c: len(chunks[c][1]))  # similar lengths share a batch
        with torch.inference_mode():
            for b in range(0, len(order), self.batch_size):
                batch = [chunks[c] for c in order[b:b + self.batch_size]]
                width = max(len(ids) for _, ids in batch)
                ids = torch.zeros((len(batch), width), dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for r, (_, seq) in enumerate(batch):
                    ids[r, :len(seq)] = torch.from_numpy(seq)
                    mask[r, :len(seq)] = 1
                logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
                logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
                for r, (owner, seq) in enumerate(batch):
                    parts[owner].append((order[b + r], logp[r, :max(len(seq) - 1, 0)].numpy().astype(np.float64)))
        # a chunk's first token has no context inside the chunk: its offsets are those of the tokens it scored
        starts = [[s + 1 for s in range(0, max(len(seq), 1), self.max_positions)] for seq in sequences]
        out = []
        for ps, seq_offsets, chunk_starts in zip(parts, offsets, starts, strict=True):
            logprobs = np.concatenate([p for _, p in sorted(ps, key=lambda t: t[0])]) if ps else np.zeros(0)
            full = np.concatenate([[0], seq_offsets])
            kept = np.concatenate([full[s:s + self.max_positions - 1] for s in chunk_starts]) if len(full) > 1 \
                else np.zeros(0, dtype=np.int64)
            out.append((logprobs, kept[:len(logprobs)]))
        return out

    def close(self) -> None:
        self.model = None


class OpenAIScorer:
    """Prompt log-probabilities from an OpenAI-compatible ``/v1/completions`` endpoint (the server tokenizes)."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 120.0, transport: Any = None) -> None:
        import httpx

        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        self.client = httpx.Client(timeout=timeout_s, transport=transport)

    def token_logprobs(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self._one(text)[0] for text in texts]

    def token_logprobs_at(self, texts: Iterable[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for text in texts:
            values, offsets = self._one(text)
            if offsets is None:
                raise RuntimeError(f"{self.url}: the response gives no token offsets (text_offset, or "
                                   "decoded_token in prompt_logprobs)")
            yield values, offsets

    def _one(self, text: str) -> tuple[np.ndarray, np.ndarray | None]:
        body = {"model": self.model, "prompt": text, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 0,
                "prompt_logprobs": 0}
        import httpx

        try:
            response = self.client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise RuntimeError(f"{self.url} is unreachable ({type(exc).__name__}: {exc})") from None
        if response.status_code >= 400:
            raise RuntimeError(f"{self.url}: HTTP {response.status_code}: {response.text[:300]}")
        choice = (response.json().get("choices") or [{}])[0]
        offsets: list[int] | None = None
        if choice.get("prompt_logprobs") is not None:  # vLLM: one {token_id: {logprob}} per prompt token
            entries = [next(iter(e.values())) if isinstance(e, dict) and e else None for e in choice["prompt_logprobs"]]
            values = [e["logprob"] if e else None for e in entries]
            pieces = [e.get("decoded_token") if e else None for e in entries[1:]]
            if all(isinstance(p, str) for p in pieces):  # offsets of tokens 1.. from the decoded pieces
                ends = np.cumsum([len(p) for p in pieces])
                offsets = list(len(text) - ends[-1] + ends - [len(p) for p in pieces]) if pieces else []
        elif (choice.get("logprobs") or {}).get("token_logprobs") is not None:  # echo: the prompt, then 1 token
            values = choice["logprobs"]["token_logprobs"][:-1]
            if choice["logprobs"].get("text_offset") is not None:
                offsets = choice["logprobs"]["text_offset"][1:len(values)]
        else:
            raise RuntimeError(f"{self.url}: the response carries no prompt log-probabilities (serve with "
                               "prompt_logprobs or echo + logprobs)")
        if any(v is None for v in values[1:]):
            raise RuntimeError(f"{self.url}: a prompt token past the first has no log-probability")
        return (np.array([float(v) for v in values[1:]], dtype=np.float64),
                None if offsets is None else np.array(offsets, dtype=np.int64))

    def close(self) -> None:
        self.client.close()


class BigramReference:
    """An interpolated absolute-discounting bigram over token ids: p(w | v) = max(c(v, w) - d, 0) / c(v)
    + d * types(v) / c(v) * p1(w), with p1 the add-one unigram over the vocabulary (an unseen context backs off
    to p1 alone). Fitted on some sequences, it scores others: log p(token_i | token_{i-1}) for i >= 1."""

    def __init__(self, vocab_size: int, discount: float = 0.75) -> None:
        self.vocab = vocab_size
        self.discount = discount
        self.pairs = np.zeros(0, dtype=np.int64)
        self.pair_counts = np.zeros(0, dtype=np.float64)
        self.unigram = np.full(vocab_size, 1.0 / vocab_size)
        self.context = np.zeros(vocab_size)
        self.types = np.zeros(vocab_size)

    def fit(self, sequences: Iterable[Sequence[int]], buffer: int = 1 << 22) -> BigramReference:
        """Count unigrams and pairs sequence by sequence: pair keys are buffered up to ``buffer`` and merged into
        the distinct pairs' counts, so memory follows the distinct pairs, not the tokens fitted on."""
        counts = np.zeros(self.vocab, dtype=np.float64)
        pairs, pair_counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        pending: list[np.ndarray] = []
        buffered = 0

        def merge() -> tuple[np.ndarray, np.ndarray]:
            keys, inverse = np.unique(np.concatenate([pairs, *pending]), return_inverse=True)
            weights = np.concatenate([pair_counts, *(np.ones(len(p)) for p in pending)])
            return keys, np.bincount(inverse, weights=weights, minlength=len(keys))

        for sequence in sequences:
            s = np.asarray(sequence, dtype=np.int64)
            counts += np.bincount(s, minlength=self.vocab)
            if len(s) > 1:
                pending.append(s[:-1] * self.vocab + s[1:])
                buffered += len(s) - 1
            if buffered >= buffer:
                (pairs, pair_counts), pending, buffered = merge(), [], 0
        self.pairs, self.pair_counts = merge() if pending else (pairs, pair_counts)
        self.unigram = (counts + 1.0) / (counts.sum() + self.vocab)
        left = self.pairs // self.vocab
        self.context = np.bincount(left, weights=self.pair_counts, minlength=self.vocab)
        self.types = np.bincount(left, minlength=self.vocab).astype(np.float64)
        return self

    def logprobs(self, sequence: Sequence[int]) -> np.ndarray:
        s = np.asarray(sequence, dtype=np.int64)
        if len(s) < 2:
            return np.zeros(0)
        v, w = s[:-1], s[1:]
        keys = v * self.vocab + w
        at = np.clip(np.searchsorted(self.pairs, keys), 0, max(len(self.pairs) - 1, 0))
        seen = self.pairs[at] == keys if len(self.pairs) else np.zeros(len(keys), dtype=bool)
        pair = np.where(seen, self.pair_counts[at] if len(self.pairs) else 0.0, 0.0)
        ctx = self.context[v]
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(ctx > 0, np.maximum(pair - self.discount, 0.0) / ctx
                         + self.discount * self.types[v] / ctx * self.unigram[w], self.unigram[w])
        return np.log(p)


def load_scorer(spec: str) -> Scorer:
    """``hf:DIR`` or ``openai:URL#MODEL``."""
    from inference.engine_spec import EngineSpec, EngineSpecError

    try:
        parsed = EngineSpec.parse(spec)
    except EngineSpecError as exc:
        raise ValueError(f"reference {spec!r}: {exc}") from None
    if parsed.kind == "hf":
        return HFScorer(parsed.target)
    if parsed.kind == "openai":
        return OpenAIScorer(parsed.target, str(parsed.model))
    raise ValueError(f"reference {spec!r}: use 'tiny', hf:DIR or openai:URL#MODEL (an engine returning prompt "
                     "log-probabilities)")


def probe(spec: str) -> None:
    """Score one short text with the reference ``spec``; raises ValueError or RuntimeError saying why it cannot
    serve (a dead endpoint, one without prompt log-probabilities, not a checkpoint)."""
    scorer = load_scorer(spec)
    try:
        scorer.token_logprobs(["The reference model answers."])
    finally:
        scorer.close()

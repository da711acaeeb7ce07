"""Shared helpers for the inference tests: one tiny tokenizer + model per test process, and a test-double engine."""

from __future__ import annotations

import atexit
import functools
import random
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

WORDS = [
    "the",
    "city",
    "of",
    "river",
    "mountain",
    "was",
    "founded",
    "by",
    "president",
    "born",
    "in",
    "year",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "lookup",
    "search",
    "result",
    "answer",
    "question",
    "document",
    "title",
    "who",
    "what",
    "where",
    "when",
    "which",
    "tool",
    "call",
    "name",
    "arguments",
    "query",
]


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(25)) + f" {rng.randint(0, 9999)}." for _ in range(n)]


@functools.cache
def tiny_checkpoint() -> Path:
    """A tokenizer (BPE, vocab 512) and a tiny model trained/initialised once per process (about 3 s)."""
    from inference.tokenizer import save, train_tokenizer
    from training.tiny_model import init_model

    root = Path(tempfile.mkdtemp(prefix="gymforge-inference-"))
    atexit.register(shutil.rmtree, root, True)
    save(train_tokenizer(corpus(), vocab_size=512), root / "tokenizer")
    return init_model("tiny", root / "tokenizer", root / "model", seed=0)


def scripted_engine_class():  # imported lazily: HFEngine pulls in torch
    from inference.hf_engine import HFEngine, Row, RowOutput

    class ScriptedHFEngine(HFEngine):
        """Test double: the real tokenizer, prompt rendering and server plumbing, but every sample is the fixed
        ``script`` text (tokenized, then the end-of-turn token), each token with logprob -0.5. Lets tests see tool
        calls come out of a model that has never learned to make them."""

        script = ""

        def generate_rows(self, rows: Sequence[Row], progress=None) -> list[RowOutput]:
            ids = self.tokenizer.encode(self.script, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            samples = []
            for index, row in enumerate(rows):
                sample = RowOutput()
                for token in ids[: row.sampling.max_tokens]:
                    sample.token_ids.append(token)
                    sample.logprobs.append(-0.5)
                    sample.top_logprobs.append([(token, -0.5)][: row.top_logprobs])
                    self._check_finished(row, sample)
                    if progress is not None:
                        progress(index, sample)
                    if sample.finish_reason:
                        break
                samples.append(sample)
            return samples

    return ScriptedHFEngine

"""Stage `tokenizer`: gymforge's byte-level BPE, trained once on the `world` documents (or local text files).

The tokenizer is the yardstick of every length budget (KeyChain, needles) and the vocabulary of the tiny policy, so
it is an artifact like any other: same corpus and params, same bytes, same sha256.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import polars as pl
from pydantic import Field, field_validator

from data_contracts.readers import TEXT_SUFFIXES, text_files
from data_contracts.schemas import TOKENIZER, between, matches
from data_contracts.stage import Artifact, Check, Expect, Params, stage


def keyword_or_dir(field: str, value: str, keyword: str, meaning: str) -> str:
    """Validate a param that is either ``keyword`` or an existing local directory."""
    if value != keyword and not Path(value).is_dir():
        raise ValueError(f"{field}={value!r}: set {keyword!r} ({meaning}) or an existing local directory")
    return value



class TokenizerParams(Params):
    corpus: str = Field(
        "world",
        description="'world' to train on the world documents, or a local directory of .txt/.md files (read in "
        "sorted path order)",
    )
    vocab_size: int = Field(8192, ge=300, le=1_000_000, description="target vocabulary size, special tokens included")
    min_frequency: int = Field(2, description="a merge must occur at least this often in the corpus")
    name: str = Field("gymforge-bpe", description="name recorded in the artifact row and in per-row records")

    @field_validator("corpus")
    @classmethod
    def _corpus(cls, v: str) -> str:
        return keyword_or_dir("corpus", v, "world", "the world documents")

    def local_inputs(self) -> list[str]:
        return [] if self.corpus == "world" else [self.corpus]


def corpus_texts(corpus: str, inputs: Mapping[str, Artifact]) -> Iterator[str]:
    """The training texts: world documents (title and text), or every text file under a directory."""
    if corpus == "world":
        docs = inputs["world"].read("documents").select("title", "text")
        for title, text in docs.iter_rows():
            yield f"{title}\n{text}"
        return
    files = text_files(corpus)
    if not files:
        raise ValueError(f"corpus directory {corpus} holds no {'/'.join(TEXT_SUFFIXES)} files")
    texts = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            texts += 1
            yield text
    if not texts:
        raise ValueError(f"corpus directory {corpus}: every {'/'.join(TEXT_SUFFIXES)} file is empty")


def _sha_matches(frame: pl.DataFrame) -> list[bool]:
    from inference.tokenizer import fingerprint

    return [
        fingerprint(j, t) != s for j, t, s in frame.select("tokenizer_json", "chat_template", "sha256").iter_rows()
    ]


TOKENIZER_CONTRACT = TOKENIZER.contract(
    expectations=(
        Expect("ExpectTableRowCountToEqual", value=1),
        matches("sha256", r"^[0-9a-f]{64}$"),
        matches("chat_template", r"\{%-?\s*generation\s*-?%\}"),
        between("vocab_size", min_value=263),
    ),
    checks=(Check("sha256_matches_contents", _sha_matches, description="sha256 recomputed from json + template"),),
    min_rows=1,
)


@stage(
    name="tokenizer",
    version="2",  # 2: the chat template leaves turns flagged train: false out of the generation mask
    inputs=("world",),
    params=TokenizerParams,
    outputs={"tokenizer": TOKENIZER_CONTRACT},
)
def tokenizer(inputs: Mapping[str, Artifact], params: TokenizerParams, partition: str) -> dict[str, pl.DataFrame]:
    """Train the byte-level BPE with the ChatML + tool-calling chat template; one row."""
    from inference.tokenizer import to_row, train_tokenizer

    tok = train_tokenizer(corpus_texts(params.corpus, inputs), params.vocab_size, params.min_frequency)
    row = to_row(tok, params.name)
    return {"tokenizer": pl.DataFrame([row], schema_overrides={"vocab_size": pl.Int64})}


def resolve_tokenizer(spec: str, inputs: Mapping[str, Artifact]):
    """The tokenizer a length budget is measured with: ``"default"`` = the `tokenizer` input artifact, otherwise a
    local transformers tokenizer directory."""
    from inference.tokenizer import load, tokenizer_from_row

    if spec == "default":
        rows = inputs["tokenizer"].read("tokenizer")
        if rows.height != 1:
            raise ValueError(f"the tokenizer artifact must hold exactly one row, found {rows.height}")
        return tokenizer_from_row(rows.row(0, named=True))
    return load(spec)


class LengthParams(Params):
    """Params shared by the stages that assemble prompts to a token budget (keychain, needles)."""

    target_tokens: int = Field(
        16384, ge=256, le=1 << 20, description="prompt length target; the prompt lands in [target - 2%, target]"
    )
    tokenizer: str = Field("default", description="'default' = the tokenizer artifact, or a local tokenizer dir")
    max_adjust_steps: int = Field(4, ge=0, le=16, description="bounded length corrections after the exact count")

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, v: str) -> str:
        return keyword_or_dir("tokenizer", v, "default", "the tokenizer artifact")

    def local_inputs(self) -> list[str]:
        return [] if self.tokenizer == "default" else [self.tokenizer]

"""Stage `tokenizer`: gymforge's byte-level BPE, trained once on the `world` documents (or local text files) and,
with ``domain_text``, on the text tool-use prompts are made of (the domains' system prompts, tool schemas, calls and
record fields).

The tokenizer is the yardstick of every length budget (KeyChain, needles) and the vocabulary of the tiny policy, so
it is an artifact like any other: same corpus and params, same bytes, same sha256.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import between, matches
from data_contracts.stage import Artifact, Check, Expect, Params, stage
from tasks.readers import TEXT_SUFFIXES, text_files
from tasks.records import TOKENIZER


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
    domain_text: bool = Field(False, description="also train on the text tool-use prompts are made of: each domain's "
                              "system prompt, tool schemas (full and compact, as prompts write them), tool calls and "
                              "record fields (domain_graphs; held-out domains left out). On the tiny world the "
                              "prose alone leaves JSON keys and tool names in letters and pieces (bench/RESULTS.md)")
    heldout: tuple[str, ...] = Field(("telecom",), description="domains whose text domain_text leaves out (the "
                                     "held-out domains of evaluation)")

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


def domain_texts(domains: pl.DataFrame, heldout: tuple[str, ...] = ()) -> Iterator[str]:
    """One text per domain of a ``domain_graphs`` output, outside ``heldout``: its system prompt, then per tool the
    full and the compact schema (one JSON object per line, as the chat template offers tools) and a call naming
    every parameter, then per entity a record with its columns (compact JSON, as tool results are written)."""
    import json

    from envgen.compiler import compile_domain
    from envgen.customers import POLICY
    from envgen.domain_spec import DomainSpec
    from envgen.small import compact_schema
    from envgen.taskgen import system_prompt

    placeholder = {"integer": 0, "number": 0.0, "boolean": True}
    for name, spec_json in domains.sort("domain").select("domain", "spec_json").iter_rows():
        if name in heldout:
            continue
        domain = compile_domain(DomainSpec.model_validate_json(spec_json))
        lines = [system_prompt(domain, (POLICY,))]
        for schema in domain.schemas():
            properties = schema["function"]["parameters"]["properties"]
            arguments = {p: (spec["enum"][0] if "enum" in spec else placeholder.get(spec.get("type"), ""))
                         for p, spec in properties.items()}
            lines += [json.dumps(schema), json.dumps(compact_schema(schema)),
                      json.dumps({"name": schema["function"]["name"], "arguments": arguments})]
        for entity in domain.spec.entities:
            columns = [entity.key, *(r.field for r in entity.relations), *(f.name for f in entity.fields)]
            lines.append(json.dumps(dict.fromkeys(columns, ""), separators=(",", ":")))
        yield "\n".join(lines)


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
    version="3",  # 2: the chat template leaves turns flagged train: false out of the generation mask; 3: domain_text
    inputs=("world", "domain_graphs"),
    optional_inputs={"domain_graphs": "domain_text"},
    params=TokenizerParams,
    outputs={"tokenizer": TOKENIZER_CONTRACT},
)
def tokenizer(inputs: Mapping[str, Artifact], params: TokenizerParams, partition: str) -> dict[str, pl.DataFrame]:
    """Train the byte-level BPE with the ChatML + tool-calling chat template; one row."""
    from inference.tokenizer import to_row, train_tokenizer

    texts = corpus_texts(params.corpus, inputs)
    if params.domain_text:
        texts = itertools.chain(texts, domain_texts(inputs["domain_graphs"].read("domains"), params.heldout))
    tok = train_tokenizer(texts, params.vocab_size, params.min_frequency)
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

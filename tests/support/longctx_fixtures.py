"""Small, deterministic inputs for the long-context data stages (keychain, needles, rl_mix): a qa_seed frame in the
schema of ``tasks/longctx/qa_seeds.py`` plus pass counts, world-like documents, and a tokenizer artifact trained on them."""

from __future__ import annotations

import json
import random
from functools import cache

import polars as pl

from data_contracts.stage import FrameArtifact
from tasks.longctx.records import QA_SEED

WORDS = ("river", "harbour", "council", "mayor", "ledger", "founded", "northern", "valley", "archive", "orchard",
         "station", "treaty", "museum", "bridge", "engineer", "painter", "novel", "company", "festival", "railway",
         "lighthouse", "cathedral", "market", "province", "village", "library", "republic", "senate", "garden",
         "island", "mountain", "canal", "factory", "theatre", "chapel", "quarry", "tower", "manor", "academy")
CITIES = ("Northwick", "Eastmere", "Calder Hall", "Brightwater", "Oakhaven", "Silverton", "Redcliff", "Mossgate")


def sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 14))
    return " ".join(words).capitalize() + rng.choice(".!?" if rng.random() < 0.1 else ".")


def seed_rows(n: int, prefix: str, seed: int = 0, split: str = "train") -> list[dict]:
    """qa_seed rows whose answer is written in their first supporting document."""
    rng = random.Random(f"{prefix}/{seed}")
    rows = []
    for i in range(n):
        answer = rng.choice(CITIES)
        docs = []
        for j in range(4):
            text = " ".join(sentence(rng) for _ in range(rng.randint(3, 7)))
            if j == 0:
                text += f" The archive of {prefix} {i} lies in {answer}."
            docs.append({"title": f"Entry {prefix}{i}-{j}", "text": text, "is_supporting": j < 2})
        rows.append({
            "id": f"{prefix}{i}", "source": "world",
            "question": f"In which city does the archive of {prefix} {i} lie, given its {rng.choice(WORDS)}?",
            "answer": answer, "aliases": [], "docs": json.dumps(docs), "hops": 2, "type": "bridge", "split": split,
            "pass_count": rng.randint(1, 7), "pass_k": 8,
        })
    return rows


def seed_frame(n: int, prefix: str, seed: int = 0, split: str = "train") -> pl.DataFrame:
    return pl.DataFrame(seed_rows(n, prefix, seed, split),
                        schema_overrides={"aliases": pl.List(pl.String), "pass_count": pl.Int64, "pass_k": pl.Int64})


@cache
def qa_filtered(n_kept: int = 24, n_rejected: int = 240) -> FrameArtifact:
    rejected = seed_frame(n_rejected, "r").with_columns(pl.lit("too_hard").alias("reason"))
    return FrameArtifact({"seeds": seed_frame(n_kept, "k"), "rejected": rejected})


@cache
def world_documents(n: int = 300) -> pl.DataFrame:
    rng = random.Random("world-docs")
    return pl.DataFrame({
        "doc_id": [f"d{i}" for i in range(n)],
        "title": [f"Entity {i}" for i in range(n)],
        "text": [" ".join(sentence(rng) for _ in range(rng.randint(4, 9))) for _ in range(n)],
        "entity_id": [f"e{i}" for i in range(n)],
    })


@cache
def tokenizer_artifact(vocab_size: int = 800) -> FrameArtifact:
    from inference.tokenizer import to_row, train_tokenizer

    texts = [d["text"] for row in seed_rows(200, "r") for d in json.loads(row["docs"])]
    texts += world_documents()["text"].to_list()
    return FrameArtifact({"tokenizer": pl.DataFrame([to_row(train_tokenizer(texts, vocab_size))])})


def tokenizer():
    from inference.tokenizer import tokenizer_from_row

    return tokenizer_from_row(tokenizer_artifact().read("tokenizer").row(0, named=True))


@cache
def real_world() -> tuple[FrameArtifact, FrameArtifact]:
    """The QA room's `world` stage output (small) and the `tokenizer` stage trained on its documents."""
    from flows.registry import stage_named

    world_stage, tok_stage = stage_named("world"), stage_named("tokenizer")
    world = FrameArtifact(world_stage.run(
        {}, world_stage.parse_params({"n_entities": 600, "n_questions": 200, "n_distractors": 2}), "p0"))
    tok = FrameArtifact(tok_stage.run({"world": world}, tok_stage.parse_params({"vocab_size": 2048}), "p0"))
    return world, tok

def vault_seeds(n: int) -> pl.DataFrame:
    """QA seeds "Where is item i kept?" with the answer in a supporting document, for the filters' tests."""
    docs = [json.dumps([{"title": f"Doc {i}", "text": f"Item {i} is kept in vault {i}.", "is_supporting": True},
                        {"title": "Other", "text": "Nothing relevant here.", "is_supporting": False}])
            for i in range(n)]
    return QA_SEED.frame([
        {"id": f"s{i}", "source": "world", "question": f"Where is item {i} kept?", "answer": f"vault {i}",
         "aliases": [f"vault number {i}"], "docs": docs[i], "hops": 1, "type": "bridge", "split": "train"}
        for i in range(n)
    ])

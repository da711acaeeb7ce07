"""The synthetic world: a knowledge graph, one encyclopedia document per entity, and verified multi-hop questions.

It is the embedded default seed source for KeyChain, built the way LongCat-Flash-Thinking-2601 builds QA for search
("Graph-based QA Synthesis for Search"): a relational entity graph (here generated with Faker instead of crawled
from Wikipedia), connected subgraphs sampled as reasoning paths, questions that obfuscate names, numbers, places and
dates ("a city founded in the 1870s", "an organisation with about 4,000 employees"), and answer-uniqueness
verification: the obfuscated constraints are re-evaluated over the whole graph and a question is kept only if
exactly one answer satisfies them. On a conflict the report adds attributes of the ground-truth entity and
re-synthesizes; so does this stage, within ``max_constraints`` and ``max_retries``, then rejects with the reason.

Every relation is functional from its subject (a person has one birthplace, an organisation one founder), so a
question is a set of attribute constraints on an anchor plus a relation path; the check intersects indexed
attribute buckets and follows integer relation arrays (numpy), a few microseconds per candidate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl
from pydantic import Field

from data_contracts.schemas import in_set, min_length, unique
from data_contracts.stage import REJECTED, stage
from envgen.rewards import normalize
from tasks.longctx.qa_seeds import answer_cap, seed_contract
from tasks.longctx.records import SEED_REJECTED
from tasks.longctx.world.documents import render_document
from tasks.longctx.world.graph import DATES, NUMERIC, RELATIONS, STAGE, TYPE_NOUN, World
from tasks.longctx.world.questions import QuestionParams, synthesize
from tasks.longctx.world.records import DOCUMENT, ENTITY, RELATION, WORLD_SEED


class WorldParams(QuestionParams):
    n_entities: int = Field(2000, ge=60, description="entities in the graph (people, organisations, places, "
                                                     "works, events)")
    n_questions: int = Field(500, ge=0, description="questions to synthesize in this partition")


ENTITIES_CONTRACT = ENTITY.contract(expectations=(unique("name"), in_set("type", TYPE_NOUN)), min_rows=1)
DOCUMENTS_CONTRACT = DOCUMENT.contract(expectations=(min_length("text", 20),), min_rows=1)
RELATIONS_CONTRACT = RELATION.contract(expectations=(in_set("relation", RELATIONS),))
WORLD_SEEDS_CONTRACT = seed_contract(WORLD_SEED, "critical", hops=(2, 4))


def entity_frame(world: World) -> pl.DataFrame:
    rows = []
    for i, rec in enumerate(world.records):
        row = {"entity_id": f"E{i}", "type": rec["type"], "name": rec["name"], "aliases": world.aliases[i],
               "category": world.kind(i)}
        row.update({a: rec.get(a) for a in (*DATES, *NUMERIC)})
        row.update({r: f"E{world.rel[r][i]}" if world.rel[r][i] >= 0 else None for r in RELATIONS})
        rows.append(row)
    return ENTITY.frame(rows)


def relation_frame(world: World) -> pl.DataFrame:
    parts = []
    for r, arr in world.rel.items():
        subjects = np.flatnonzero(arr >= 0)
        parts.append(pl.DataFrame({"subject": [f"E{s}" for s in subjects], "relation": [r] * len(subjects),
                                   "object": [f"E{o}" for o in arr[subjects]]}, schema=RELATION.schema))
    return pl.concat(parts)


@lru_cache(maxsize=1)
def build_world(seed: int, n_entities: int) -> tuple[World, tuple[str, ...]]:
    """The graph and its rendered documents; depends on (seed, n_entities) only, never on the partition, so a
    worker running several partitions builds it once (the last one is kept; nothing mutates it)."""
    world = World(seed, n_entities)
    return world, tuple(render_document(world, i) for i in range(world.n))


def generate_seeds(world: World, docs: Sequence[str], p: WorldParams, partition: str) -> tuple[list, list]:
    """The partition's questions; no answer holds more than its share of them (``answer_cap``): one over it is
    drawn again while synthesizing, and the last ones of an answer over the share of the questions finally kept
    (fewer where some failed) are rejected."""
    seeds, rejected, asked, answered = [], [], set(), Counter()
    for index in range(p.n_questions):
        row, reason = synthesize(world, docs, p, partition, index, asked, answered, answer_cap(p.n_questions))
        if row is None:
            rejected.append({"id": f"world:{partition}:{index}", "source": "world", "reason": reason})
        else:
            seeds.append(row)
    while seeds and max(answered.values()) > answer_cap(len(seeds)):
        answer = max(answered, key=answered.__getitem__)
        last = max(k for k, row in enumerate(seeds) if normalize(row["answer"]) == answer)
        rejected.append({**{k: seeds[last][k] for k in ("id", "source")},
                         "reason": f"answer over share: {seeds[last]['answer']!r} answers more than "
                                   f"{answer_cap(len(seeds))} of {len(seeds)} questions"})
        del seeds[last]
        answered[answer] -= 1
    return seeds, rejected


@stage(
    name=STAGE,
    # 2: countries from ISO 3166-1 (at least 50), eight work and twelve event kinds, no answer over 5% of questions
    version="2",
    params=WorldParams,
    outputs={"entities": ENTITIES_CONTRACT, "documents": DOCUMENTS_CONTRACT, "relations": RELATIONS_CONTRACT,
             "seeds": WORLD_SEEDS_CONTRACT, REJECTED: SEED_REJECTED.contract()},
)
def world(inputs: Mapping[str, Any], params: WorldParams, partition: str) -> dict[str, pl.DataFrame]:
    """A Faker knowledge graph, one document per entity, and 2-4 hop bridge/comparison questions whose answer is
    verified unique over the whole graph."""
    world, docs = build_world(params.seed, params.n_entities)
    seeds, rejected = generate_seeds(world, docs, params, partition)
    ids = [f"E{i}" for i in range(world.n)]
    return {
        "entities": entity_frame(world),
        "documents": pl.DataFrame({"doc_id": ids, "title": [r["name"] for r in world.records], "text": docs,
                                   "entity_id": ids}, schema=DOCUMENT.schema),
        "relations": relation_frame(world),
        "seeds": WORLD_SEED.frame(seeds),
        REJECTED: SEED_REJECTED.frame(rejected),
    }

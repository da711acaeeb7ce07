"""The records of the synthetic world: its entities, their documents, the relations between them, and its questions."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, STRINGS, Record, col, cols
from tasks.longctx.records import QA_SEED
from tasks.longctx.world.graph import RELATIONS

ENTITY = Record("entity", "An entity of the synthetic world's knowledge graph.", {**cols(
    entity_id=(pl.String, "E<index>"),
    type=(pl.String, "person | organisation | city | country | work | event"),
    name=(pl.String, "the entity's name, unique"),
    aliases=(STRINGS, "other names"),
    category=(pl.String, "the kind within its type (an organisation's industry, a work's medium)"),
    born=(pl.Date, "a person's birth date"),
    founded=(pl.Int64, "an organisation's founding year"),
    released=(pl.Date, "a work's release date"),
    held=(pl.Date, "an event's date"),
    population=(pl.Int64, "a city's or country's population"),
    employees=(pl.Int64, "an organisation's employees"),
    budget=(pl.Int64, "a work's or event's budget"),
    attendance=(pl.Int64, "an event's attendance"),
), **{r: col(pl.String, f"entity_id of the {r.replace('_', ' ')} relation's object, if any")
      for r in RELATIONS}}, key=("entity_id",), required=("name", "type"))

DOCUMENT = Record("document", "An encyclopedia-style document of one world entity.", cols(
    doc_id=(pl.String, "D<index>"),
    title=(pl.String, "the entity's name"),
    text=(pl.String, "the document"),
    entity_id=(pl.String, "the entity it describes"),
), key=("doc_id",), required=("title", "text"))

RELATION = Record("relation", "One edge of the world's knowledge graph.", cols(
    subject=(pl.String, "entity_id"),
    relation=(pl.String, "one of the world's relations"),
    object=(pl.String, "entity_id"),
), required=("subject", "object"))

WORLD_SEED = QA_SEED.extend("world_seed", "A question of the synthetic world, with the program that answers it.", cols(
    program=(JSON, "the graph walk that defines the answer (relations and attribute filters), re-run for uniqueness"),
))

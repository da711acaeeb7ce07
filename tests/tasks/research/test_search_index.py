"""The search index as a directory artifact: published atomically, gated, one per corpus key; an empty corpus is
a clear error that publishes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import StageError
from data_contracts.store import ArtifactStore
from tasks.longctx.world import world
from tasks.research.search import SearchIndex
from tasks.research.search_index import search_index

WORLD = {"n_entities": 80, "n_questions": 0}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[ArtifactStore, Catalog, str]:
    root = tmp_path_factory.mktemp("data")
    s, c = open_store(root), Catalog(root)
    world_key = execute_stage(s, c, world, WORLD, {}, "p0").key
    return s, c, world_key


def test_the_world_index_is_published_once_per_corpus(store) -> None:
    s, c, world_key = store
    first = execute_stage(s, c, search_index, {}, {"world": world_key}, "p0")
    again = execute_stage(s, c, search_index, {}, {"world": world_key}, "p0")
    assert not first.cached and again.cached and again.key == first.key
    artifact = s.get("search_index", first.key)
    index = SearchIndex.open(artifact.directory)
    summary = artifact.read("summary").row(0, named=True)
    assert len(index) == summary["documents"] == WORLD["n_entities"] and summary["terms"] > 100
    assert index.search(index.document("E5").title, k=3)[0].doc_id == "E5"


def test_a_directory_corpus_is_keyed_by_its_content(store, tmp_path: Path) -> None:
    s, c, world_key = store
    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text(json.dumps({"id": "a", "title": "Alpha", "text": "Alpha is a harbour."}) + "\n")
    params = {"corpus": str(corpus)}
    first = execute_stage(s, c, search_index, params, {"world": world_key}, "p0")
    (corpus / "b.md").write_text("# Beta\n\nBeta is a city of canals.\n")
    second = execute_stage(s, c, search_index, params, {"world": world_key}, "p0")
    assert second.key != first.key and second.outputs == {"summary": 1}
    assert len(SearchIndex.open(s.get("search_index", second.key).directory)) == 2


def test_an_empty_corpus_is_a_clear_error_and_publishes_nothing(store, tmp_path: Path) -> None:
    s, c, world_key = store
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("   \n")
    before = catalog_rows(c, "search_index")
    with pytest.raises(StageError, match="the corpus is empty"):
        execute_stage(s, c, search_index, {"corpus": str(empty)}, {"world": world_key}, "p0")
    assert catalog_rows(c, "search_index") == before


def catalog_rows(catalog: Catalog, stage: str) -> int:
    return len(catalog.entries(stage=stage))

"""Stage `search_index`: the local search engine's index as a directory artifact, built once per corpus.

The corpus is the ``world`` documents (default), a local directory or file of text/Markdown/JSONL, or a
HotpotQA/2Wiki/MuSiQue file's paragraphs (``hotpotqa:PATH``); tasks/research/search/corpus.py reads them and
tasks/research/search/index.py builds the bm25s index (kept over tantivy for its byte-identical builds, bench_search).
The artifact key covers the corpus: the ``world`` artifact's key, or the content of the local files, so one
corpus gives one index, published atomically like any artifact and opened by every stage and worker that searches
(``SearchIndex.open(artifact.directory)``, memory-mapped). The ``world`` input is read only for the world corpus.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl
from pydantic import Field

from data_contracts.stage import Artifact, DirectoryCheck, DirectoryContract, Params, stage
from tasks.research.records import SEARCH_INDEX
from tasks.research.search import SearchIndex, load_corpus
from tasks.research.search.corpus import QA_FORMATS

INDEX_DIRECTORY = "index"
WORLD = "world"


class SearchIndexParams(Params):
    corpus: str = Field(WORLD, min_length=1, description="world (the world stage's documents), a local directory or "
                                                         "file of .txt/.md/.jsonl, or hotpotqa:|2wiki:|musique:PATH")

    def local_inputs(self) -> list[str]:
        if self.corpus == WORLD:
            return []
        kind, sep, rest = self.corpus.partition(":")
        return [rest if sep and kind in QA_FORMATS else self.corpus]


def _opens_and_answers(path: Path) -> str | None:
    """The index opens, holds the documents its card counts, and finds its first document by that title."""
    try:
        index = SearchIndex.open(path)
    except (OSError, ValueError) as exc:
        return f"the index does not open: {exc}"
    if len(index) != index.info.documents or not len(index):
        return f"the index holds {len(index)} documents, its card says {index.info.documents}"
    first = index.document(index.doc_ids()[0])
    if not index.search(first.title, k=len(index)):
        return f"a search for the title {first.title!r} of the first document finds nothing"
    return None


SEARCH_INDEX_DIRECTORY = DirectoryContract(INDEX_DIRECTORY, checks=(
    DirectoryCheck("opens_and_answers", _opens_and_answers, "the index opens, counts its documents and answers"),
))


@stage(name="search_index", version="1", inputs=(WORLD,), params=SearchIndexParams, kind="index",
       directory=SEARCH_INDEX_DIRECTORY, outputs={"summary": SEARCH_INDEX.contract(min_rows=1)})
def search_index(inputs: Mapping[str, Artifact], params: SearchIndexParams, partition: str,
                 out_dir: Path) -> dict[str, pl.DataFrame]:
    """Build the BM25 index of the corpus into the artifact's directory."""
    source = inputs[WORLD].read("documents") if params.corpus == WORLD else params.corpus
    corpus = load_corpus(source)
    index = SearchIndex.build(corpus, out_dir)
    info = index.info
    return {"summary": SEARCH_INDEX.frame([{
        "corpus_source": params.corpus, "corpus_fingerprint": info.corpus_fingerprint, "documents": info.documents,
        "terms": index.vocabulary_size(), "engine": info.engine, "engine_version": info.engine_version}])}

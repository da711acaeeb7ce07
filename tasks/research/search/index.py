"""The search index: BM25 over a corpus, built into a directory and opened from it.

Engine: ``bm25s`` (BM25 as a sparse document-term score matrix in numpy), kept after measuring it against
``tantivy``'s Python bindings on 100,000 world documents with the same analysis (bench/bench_search.py,
figures in bench/RESULTS.md): the same recall@10; builds of 5-8 s for both; 1-2 ms per query for both on a
shared 2-core machine (tantivy 0.8-1.8 ms, bm25s 1.5 ms over three runs: the load decided more than the
engine); tantivy needs less memory (7 MB serving against 55 MB, 67 MB building against 173 MB) and disk (7 MB
against 16 MB). bm25s wins on what the project relies on: the same corpus gives byte-identical index files
(plain ``.npy`` and JSON in corpus order; tantivy names its segments with random UUIDs), as content-addressed
directory artifacts and idempotent backfills need, and a query is a bag of words, with no query language to
escape against hostile input. Revisit for corpora of millions of documents: its build holds every token in
memory and each query scores into an array over all documents.

Directory layout: ``index.json`` (format, engine and version, analysis, corpus source and fingerprint,
document count), ``documents.parquet`` (doc_id, title, text in corpus order) and ``bm25s/`` (the engine's
files, opened memory-mapped so processes serving the same index share its pages).

Analysis: lowercase words of two or more characters (bm25s' default pattern), English stop words removed, no
stemming: bm25s stems through a set whose order varies between processes (breaking byte determinism), and in a
one-off check on 20,000 world documents PyStemmer did not raise recall@10 (0.107 with it, 0.111 without).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict

from tasks.research.search.corpus import Corpus, Document

ENGINE = "bm25s"
FORMAT = 1
INDEX_FILE = "index.json"
DOCUMENTS_FILE = "documents.parquet"
ENGINE_DIR = "bm25s"
STOPWORDS = "en"
TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s' default, recorded so a reader knows the analysis
BM25 = {"method": "lucene", "k1": 1.2, "b": 0.75}  # Lucene's defaults (also tantivy's)
SNIPPET_CHARS = 240
_ANALYSIS = {"lower": True, "token_pattern": TOKEN_PATTERN, "stopwords": STOPWORDS, "show_progress": False}
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


class IndexInfo(BaseModel):
    """The contents of ``index.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int
    engine: str
    engine_version: str
    analysis: dict[str, str | bool]
    bm25: dict[str, str | float]
    corpus_source: str
    corpus_fingerprint: str
    documents: int


@dataclass(frozen=True)
class Hit:
    doc_id: str
    title: str
    score: float
    snippet: str


def analyze(texts: list[str]) -> list[list[str]]:
    """The terms of each text under the index's analysis (documents, queries and snippets alike)."""
    return bm25s.tokenize(texts, return_ids=False, **_ANALYSIS)


class SearchIndex:
    """A built index; ``SearchIndex.build(corpus, dir)`` or ``SearchIndex.open(dir)``."""

    def __init__(self, directory: Path, info: IndexInfo, retriever: bm25s.BM25,
                 documents: pl.DataFrame) -> None:
        self.directory = directory
        self.info = info
        self._retriever = retriever
        self._ids = documents["doc_id"].to_list()
        self._titles = documents["title"]
        self._texts = documents["text"]
        self._row = {doc_id: i for i, doc_id in enumerate(self._ids)}

    @classmethod
    def build(cls, corpus: Corpus, directory: str | Path) -> SearchIndex:
        """Index ``corpus`` into ``directory`` (absent or empty) and return it opened."""
        directory = Path(directory)
        if directory.exists() and any(directory.iterdir()):
            raise ValueError(f"{directory}: not empty; build an index into a new or empty directory")
        directory.mkdir(parents=True, exist_ok=True)
        docs = corpus.documents
        tokens = bm25s.tokenize([f"{d.title}\n{d.text}" for d in docs], return_ids=True, **_ANALYSIS)
        retriever = bm25s.BM25(**BM25)
        retriever.index(tokens, show_progress=False)
        retriever.save(directory / ENGINE_DIR, show_progress=False)
        frame = pl.DataFrame([(d.doc_id, d.title, d.text) for d in docs], orient="row",
                             schema={"doc_id": pl.String, "title": pl.String, "text": pl.String})
        frame.write_parquet(directory / DOCUMENTS_FILE)
        info = IndexInfo(format=FORMAT, engine=ENGINE, engine_version=bm25s.__version__,
                         analysis={"token_pattern": TOKEN_PATTERN, "lowercase": True, "stopwords": STOPWORDS,
                                   "stemmer": "none"},
                         bm25=BM25, corpus_source=corpus.source, corpus_fingerprint=corpus.fingerprint(),
                         documents=len(docs))
        (directory / INDEX_FILE).write_text(json.dumps(info.model_dump(), indent=2, sort_keys=True) + "\n")
        return cls.open(directory)

    @classmethod
    def open(cls, directory: str | Path) -> SearchIndex:
        directory = Path(directory)
        meta = directory / INDEX_FILE
        if not meta.is_file():
            raise FileNotFoundError(f"{directory}: not a search index (no {INDEX_FILE}); build one with "
                                    "SearchIndex.build")
        info = IndexInfo.model_validate_json(meta.read_text())
        if info.engine != ENGINE or info.format != FORMAT:
            raise ValueError(f"{directory}: a {info.engine} index of format {info.format}; this code reads "
                              f"{ENGINE} format {FORMAT}: rebuild the index")
        retriever = bm25s.BM25.load(directory / ENGINE_DIR, mmap=True, show_progress=False, verbosity=0)
        return cls(directory, info, retriever, pl.read_parquet(directory / DOCUMENTS_FILE))

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._row

    def doc_ids(self) -> list[str]:
        """Every document id, in corpus order."""
        return list(self._ids)

    def titles(self) -> list[str]:
        """Every document title, in corpus order."""
        return self._titles.to_list()

    def vocabulary_size(self) -> int:
        """Distinct terms the index knows."""
        return len(self._retriever.vocab_dict)

    def document(self, doc_id: str) -> Document:
        """The document with this id (``KeyError`` when there is none)."""
        i = self._row[doc_id]
        return Document(doc_id, self._titles[i], self._texts[i])

    def search(self, query: str, k: int = 10, exclude: Collection[str] = ()) -> list[Hit]:
        """The ``k`` best documents with a positive score, best first, ties in corpus order; ``exclude`` ids
        are never returned."""
        vocab = self._retriever.vocab_dict
        query_terms = list(dict.fromkeys(t for t in analyze([query])[0] if t in vocab))
        if not query_terms or k < 1:
            return []
        scores = self._retriever.get_scores_from_ids([vocab[t] for t in query_terms])
        scores[[self._row[d] for d in exclude if d in self._row]] = 0.0
        found = np.flatnonzero(scores > 0)
        if len(found) > k:  # the k-th best score, then ties in corpus order: never the partition's own order
            kth = np.partition(scores[found], len(found) - k)[len(found) - k]
            above = found[scores[found] > kth]
            found = np.concatenate([above, found[scores[found] == kth][: k - len(above)]])
        best = found[np.lexsort((found, -scores[found]))]
        wanted = set(query_terms)
        return [Hit(self._ids[i], self._titles[i], float(scores[i]), self._snippet(self._texts[i], wanted))
                for i in best.tolist()]

    @staticmethod
    def _snippet(text: str, query_terms: set[str]) -> str:
        """The first sentence holding the most distinct query terms, cut to ``SNIPPET_CHARS``."""
        sentences = [s for s in _SENTENCES.split(text) if s.strip()] or [text]
        overlap = [len(query_terms.intersection(t)) for t in analyze(sentences)]
        return clip(sentences[overlap.index(max(overlap))], SNIPPET_CHARS)


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

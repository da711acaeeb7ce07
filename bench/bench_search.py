"""Search engines on the world corpus: tantivy (its Python bindings) against bm25s, with the same analysis (one
field, title + text; lowercase words of two or more characters; English stop words; BM25 k1=1.2, b=0.75):
index build time, queries per second, memory, disk, byte-identical rebuilds, and recall@10 of the supporting
documents of the world's own multi-hop questions (the question as the query). Then ``SearchIndex``, the kept
engine as the ``search`` tool uses it (snippets included).

Every build and every query run is a fresh process, so its memory is its own: a build reports its time and
peak RSS above the corpus it read; a query run opens the built index and answers the questions one at a time,
as an agent's tool calls arrive, and reports the RSS the open index added. tantivy is not a dependency:
without it (``pip install tantivy``) its rows are skipped.

    .venv/bin/python -m bench.bench_search [--entities 100000] [--questions 1000] [--determinism-docs 5000]
        [--no-record]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import re
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench import report

WORD = r"(?u)\b\w\w+\b"
ENGINES = ("tantivy", "bm25s", "SearchIndex")


def in_fresh_process(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a new interpreter (its own memory and string-hash seed); a failure is raised here."""
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def restart_peak() -> None:
    """Linux: the peak RSS (VmHWM) restarts from the current RSS. ``ru_maxrss`` cannot be restarted, and a
    spawned child starts with its forking parent's."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def tree_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 1e6


def tree_bytes(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _tantivy_index(path: Path, create: bool) -> Any:
    import tantivy
    from bm25s.stopwords import STOPWORDS_EN

    schema = tantivy.SchemaBuilder()
    schema.add_text_field("doc_id", stored=True, tokenizer_name="raw")
    schema.add_text_field("body", stored=False, tokenizer_name="words")
    path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(schema.build(), path=str(path), reuse=not create)
    # Registered on every open: tantivy stores only the analyzer's name.
    index.register_tokenizer("words", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(WORD))
                             .filter(tantivy.Filter.lowercase())
                             .filter(tantivy.Filter.custom_stopword(list(STOPWORDS_EN))).build())
    return index


def build(engine: str, corpus_path: str, out: str, limit: int | None = None) -> dict[str, Any]:
    import polars as pl

    frame = pl.read_parquet(corpus_path, n_rows=limit)
    before = rss_mb()
    restart_peak()
    start = time.perf_counter()
    if engine == "tantivy":
        import tantivy

        index = _tantivy_index(Path(out), create=True)
        writer = index.writer(heap_size=256_000_000, num_threads=1)  # one core each, as bm25s uses
        for doc_id, title, text in frame.select("doc_id", "title", "text").iter_rows():
            writer.add_document(tantivy.Document(doc_id=doc_id, body=f"{title}\n{text}"))
        writer.commit()
        writer.wait_merging_threads()
    elif engine == "bm25s":
        import bm25s

        from tasks.research.search.index import _ANALYSIS, BM25

        tokens = bm25s.tokenize([f"{t}\n{x}" for t, x in zip(frame["title"], frame["text"], strict=True)],
                                return_ids=True, **_ANALYSIS)
        retriever = bm25s.BM25(**BM25)
        retriever.index(tokens, show_progress=False)
        retriever.save(out, show_progress=False)
    else:
        from tasks.research.search import SearchIndex, load_corpus

        SearchIndex.build(load_corpus(frame), out)
    return {"build_s": time.perf_counter() - start, "corpus_rss_mb": before,
            "build_peak_mb": peak_mb() - before,
            "disk_mb": tree_mb(Path(out))}


def query(engine: str, out: str, questions_path: str, corpus_path: str) -> dict[str, Any]:
    import bm25s
    import polars as pl

    from tasks.research.search import SearchIndex
    from tasks.research.search.index import analyze

    if engine == "tantivy":
        import tantivy  # noqa: F401  (imported before the memory baseline, like the others)
    questions = json.loads(Path(questions_path).read_text())
    before = rss_mb()
    start = time.perf_counter()
    if engine == "tantivy":
        index = _tantivy_index(Path(out), create=False)
        searcher = index.searcher()

        def top10(q: str) -> list[str]:
            words = " ".join(re.findall(WORD, q.lower()))  # lowercase: AND/OR/NOT are query operators
            parsed, _ = index.parse_query_lenient(words, ["body"])
            return [searcher.doc(address)["doc_id"][0] for _, address in searcher.search(parsed, 10).hits]
    elif engine == "bm25s":  # its low-level scoring: retrieve() costs about 2 ms more per single query
        retriever = bm25s.BM25.load(out, mmap=True, show_progress=False, verbosity=0)
        ids = pl.read_parquet(corpus_path, columns=["doc_id"])["doc_id"].to_list()

        def top10(q: str) -> list[str]:
            vocab = retriever.vocab_dict  # a repeated word counts once, as in a query parser
            wanted = dict.fromkeys(vocab[t] for t in analyze([q])[0] if t in vocab)
            scores = retriever.get_scores_from_ids(list(wanted))
            best = np.argpartition(-scores, 10)[:10]
            return [ids[i] for i in best[np.argsort(-scores[best], kind="stable")].tolist() if scores[i] > 0]
    else:
        index = SearchIndex.open(out)

        def top10(q: str) -> list[str]:
            return [hit.doc_id for hit in index.search(q, 10)]
    open_s = time.perf_counter() - start
    top10(questions[0]["question"])  # first query maps pages in; not counted
    start = time.perf_counter()
    found = [top10(q["question"]) for q in questions]
    elapsed = time.perf_counter() - start
    recall = [len(set(f) & set(q["support"])) / len(q["support"]) for f, q in zip(found, questions, strict=True)]
    hits = [bool(set(f) & set(q["support"])) for f, q in zip(found, questions, strict=True)]
    return {"open_s": open_s, "qps": len(questions) / elapsed, "serving_mb": rss_mb() - before,
            "recall10": sum(recall) / len(recall), "hit10": sum(hits) / len(hits)}


def world_corpus(entities: int, questions: int, directory: Path) -> tuple[Path, Path, int]:
    from tasks.longctx.world import WorldParams
    from tasks.longctx.world import world as world_stage

    out = world_stage.run({}, WorldParams(n_entities=entities, n_questions=questions), "bench")
    docs = out["documents"]
    by_title = dict(zip(docs["title"], docs["doc_id"], strict=True))
    items = [{"question": row["question"],
              "support": [by_title[d["title"]] for d in json.loads(row["docs"]) if d["is_supporting"]]}
             for row in out["seeds"].iter_rows(named=True)]
    corpus_path, questions_path = directory / "documents.parquet", directory / "questions.json"
    docs.write_parquet(corpus_path)
    questions_path.write_text(json.dumps(items))
    return corpus_path, questions_path, len(items)


def same_bytes(engine: str, corpus_path: Path, directory: Path, docs: int) -> bool:
    """Two builds in two processes (each with its own string-hash seed) give identical files."""
    first, second = directory / f"{engine}-a", directory / f"{engine}-b"
    for out in (first, second):
        in_fresh_process(build, engine, str(corpus_path), str(out), docs)
    return tree_bytes(first) == tree_bytes(second)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=100_000, help="world entities: one document each")
    parser.add_argument("--questions", type=int, default=1000, help="world questions asked (kept ones are queried)")
    parser.add_argument("--determinism-docs", type=int, default=5000, help="corpus prefix rebuilt twice per engine")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()
    engines = [e for e in ENGINES if e != "tantivy" or find_spec("tantivy")]
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        directory = Path(tmp)
        start = time.perf_counter()
        corpus_path, questions_path, n_questions = world_corpus(args.entities, args.questions, directory)
        corpus_mb = corpus_path.stat().st_size / 1e6
        print(f"world: {args.entities:,} documents, {n_questions:,} questions in {time.perf_counter() - start:.0f} s")
        for engine in engines:
            out = directory / engine
            rows[engine] = in_fresh_process(build, engine, str(corpus_path), str(out))
            rows[engine] |= in_fresh_process(query, engine, str(out), str(questions_path), str(corpus_path))
            rows[engine]["same_bytes"] = same_bytes(engine, corpus_path, directory, args.determinism_docs)
            print(json.dumps({"engine": engine, **{k: round(v, 4) if isinstance(v, float) else v
                                                   for k, v in rows[engine].items()}}))
    versions = {name: version(name) for name in ("bm25s", "tantivy") if find_spec(name)}
    lines = [
        "",
        "## Local search engines (bench/bench_search.py)",
        "",
        (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, shared with "
         f"other jobs (load average {os.getloadavg()[0]:.1f} at the end); "
         + ", ".join(f"{k} {v}" for k, v in versions.items())
         + f". Corpus: the world's documents, {args.entities:,} (one per entity; {corpus_mb:.0f} MB Parquet), "
         "queried with "
         f"{n_questions:,} of its multi-hop questions one at a time. Same analysis for both engines (title + text "
         "in one field; lowercase words of 2+ characters; English stop words; no stemming; BM25 k1=1.2, b=0.75); "
         "builds on one thread each. Build peak: RSS above the corpus already in memory. Serving: RSS the opened "
         "index added after answering every question (memory-mapped pages included). Recall@10: share of a "
         "question's supporting documents in the top 10; hit@10: at least one. Same bytes: two builds of the "
         f"first {args.determinism_docs:,} documents in two processes give identical files. SearchIndex: bm25s "
         "as the search tool uses it (document store, snippets of every hit)."),
        "",
        ("| engine | build s | build peak MB | index MB | open s | queries/s | serving MB | recall@10 | hit@10 "
         "| same bytes |"),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(f"| {name} | {r['build_s']:.1f} | {r['build_peak_mb']:,.0f} | {r['disk_mb']:,.0f} | {r['open_s']:.2f} | "
          f"{r['qps']:,.0f} | {r['serving_mb']:,.0f} | {r['recall10']:.3f} | {r['hit10']:.3f} | "
          f"{'yes' if r['same_bytes'] else 'no'} |" for name, r in rows.items()),
    ]
    report(lines, not args.no_record)


if __name__ == "__main__":
    main()

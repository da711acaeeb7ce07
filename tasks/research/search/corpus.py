"""Corpora for the local search engine: documents as ``(doc_id, title, text, sections)``.

Sources (``load_corpus``):
- the ``world`` stage's ``documents`` frame (``doc_id``, ``title``, ``text``);
- a local directory (or one file) of ``.txt`` / ``.md`` files (doc id: the path relative to the directory;
  title: the first level-1 heading, else the file name) and ``.jsonl`` files (one ``{"id", "title", "text"}``
  per line);
- ``hotpotqa:PATH`` / ``2wiki:PATH`` (JSON list, ``context`` [[title, [sentences]]]) and ``musique:PATH``
  (JSON Lines, ``paragraphs`` [{title, paragraph_text}]): their paragraphs, one document per title (the id),
  distinct paragraphs in first-seen order, as in the Wikipedia articles they were cut from.

A document's sections are cut at Markdown headings when it has any, else at blank-line paragraphs
("Paragraph 1", ...). A corrupt file raises ``InputFileError`` naming the file and line; a source that yields
no document raises ``CorpusError`` naming the source.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from data_contracts.stage import StageError

# The project's streaming readers. envgen sits below tasks: this import moves if they move to data_contracts.
from tasks.readers import TEXT_SUFFIXES, InputFileError, iter_json_array, iter_jsonl

QA_FORMATS = ("hotpotqa", "2wiki", "musique")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_BLANK_LINES = re.compile(r"\n\s*\n")


class CorpusError(StageError):
    """A corpus source is missing, malformed or holds no document; the message names the source."""


@dataclass(frozen=True)
class Section:
    name: str
    text: str


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str

    @cached_property
    def sections(self) -> tuple[Section, ...]:
        """Derived from the text, so an index stores only ``(doc_id, title, text)``."""
        return split_sections(self.text)


@dataclass(frozen=True)
class Corpus:
    source: str
    documents: tuple[Document, ...]

    def fingerprint(self) -> str:
        """sha256 over every document in order: the same corpus gives the same index."""
        digest = hashlib.sha256()
        for d in self.documents:
            digest.update(json.dumps([d.doc_id, d.title, d.text], ensure_ascii=False).encode() + b"\n")
        return digest.hexdigest()


def split_sections(text: str) -> tuple[Section, ...]:
    """Sections at Markdown headings (outside code fences; text before the first one is "Introduction"), or
    at blank lines when there is no heading. Empty sections are dropped; a repeated name gets " (2)", ..."""
    named: list[tuple[str, str]] = []
    name, lines, fenced, headed = "Introduction", [], False, False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            named.append((name, "\n".join(lines)))
            name, lines, headed = heading.group(2).strip() or "(untitled)", [], True
        else:
            lines.append(line)
    named.append((name, "\n".join(lines)))
    if not headed:
        named = [(f"Paragraph {i}", p) for i, p in enumerate(_BLANK_LINES.split(text), start=1)]
    sections, seen = [], {}
    for name, body in named:
        if not body.strip():
            continue
        seen[name] = seen.get(name, 0) + 1
        sections.append(Section(name if seen[name] == 1 else f"{name} ({seen[name]})", body.strip()))
    return tuple(sections)


def load_corpus(source: str | Path | pl.DataFrame) -> Corpus:
    """A corpus from a ``documents`` frame, ``KIND:PATH`` for a QA dataset file, or a directory or a file."""
    if isinstance(source, pl.DataFrame):
        return _corpus("documents frame", documents_from_frame(source))
    kind, sep, rest = str(source).partition(":")
    if sep and kind in QA_FORMATS:
        return _corpus(str(source), qa_documents(kind, Path(rest)))
    return _corpus(str(source), directory_documents(Path(source)))


def _corpus(source: str, documents: Iterable[Document]) -> Corpus:
    docs, seen = [], set()
    for d in documents:
        if d.doc_id in seen:
            raise CorpusError(f"{source}: document id {d.doc_id!r} occurs twice; ids must be unique")
        seen.add(d.doc_id)
        docs.append(d)
    if not docs:
        raise CorpusError(f"{source}: the corpus is empty (no document with text)")
    return Corpus(source, tuple(docs))


def documents_from_frame(frame: pl.DataFrame) -> Iterator[Document]:
    missing = [c for c in ("doc_id", "title", "text") if c not in frame.columns]
    if missing:
        have = ", ".join(frame.columns) or "none"
        raise CorpusError(f"documents frame: no column {', '.join(missing)} (columns: {have})")
    for doc_id, title, text in frame.select("doc_id", "title", "text").iter_rows():
        if text and text.strip():
            yield Document(str(doc_id), str(title or doc_id), text)


def directory_documents(root: Path) -> Iterator[Document]:
    if not root.exists():
        raise CorpusError(f"{root}: no such file or directory")
    # Hidden files and folders (.git, .DS_Store) are not documents.
    visible = (p for p in root.rglob("*") if not any(s.startswith(".") for s in p.relative_to(root).parts))
    files = [root] if root.is_file() else sorted(p for p in visible if p.is_file())
    for path in files:
        rel = path.name if path == root else path.relative_to(root).as_posix()
        if path.suffix == ".jsonl":
            for line, record in iter_jsonl(path):
                yield _jsonl_document(record, path, line)
        elif path.suffix in TEXT_SUFFIXES:
            try:
                text = path.read_text(encoding="utf-8-sig")
            except UnicodeDecodeError as exc:
                problem = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
                raise InputFileError(path, None, problem) from None
            if text.strip():
                yield Document(rel, _markdown_title(text) or path.stem, text)


def _markdown_title(text: str) -> str | None:
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading and len(heading.group(1)) == 1 and heading.group(2).strip():
            return heading.group(2).strip()
    return None


def _jsonl_document(record: Any, path: Path, line: int) -> Document:
    if not isinstance(record, dict):
        got = type(record).__name__
        raise InputFileError(path, line, f"expected a JSON object with id, title and text, got {got}")
    doc_id, text = record.get("id"), record.get("text")
    if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or not str(doc_id):
        raise InputFileError(path, line, "record needs an 'id' (a non-empty string or an integer)")
    if not isinstance(text, str):
        raise InputFileError(path, line, "record needs a 'text' string")
    title = record.get("title")
    return Document(str(doc_id), str(title) if title else str(doc_id), text)


def qa_documents(kind: str, path: Path) -> Iterator[Document]:
    if not path.is_file():
        raise InputFileError(path, None, f"no such {kind} file")
    paragraphs: dict[str, dict[str, None]] = {}  # title -> distinct paragraphs, both in first-seen order
    reader = iter_jsonl if kind == "musique" else iter_json_array
    for line, record in reader(path):
        for title, text in _paragraphs(kind, record, path, line):
            if title.strip() and text.strip():
                paragraphs.setdefault(title.strip(), {})[text.strip()] = None
    for title, texts in paragraphs.items():
        yield Document(title, title, "\n\n".join(texts))


def _paragraphs(kind: str, record: Any, path: Path, line: int) -> list[tuple[str, str]]:
    try:
        if kind == "musique":
            return [(str(p["title"]), str(p["paragraph_text"])) for p in record["paragraphs"]]
        return [(str(title), " ".join(s.strip() for s in sentences if s.strip()))
                for title, sentences in record["context"]]
    except (TypeError, KeyError, ValueError, AttributeError):
        shape = ("'paragraphs' [{title, paragraph_text}]" if kind == "musique"
                 else "'context' [[title, [sentences]]]")
        raise InputFileError(path, line, f"a {kind} record needs {shape}") from None

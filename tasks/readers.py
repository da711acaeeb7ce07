"""Readers of the local files users point stages at (QA datasets, math problems, corpora): streamed, and every
problem reported as an ``InputFileError`` naming the file and line, so nothing of a corrupt file is used."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data_contracts.stage import StageError

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
"""The plain-text files a corpus directory contributes (tokenizer, needles' haystacks, how-to texts, search)."""


def text_files(directory: str | Path) -> list[Path]:
    """The text files under ``directory`` (``TEXT_SUFFIXES``) in sorted path order; hidden files and folders
    (.git, .DS_Store) are not documents."""
    root = Path(directory)
    return sorted(p for p in root.rglob("*") if p.suffix in TEXT_SUFFIXES and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


class InputFileError(StageError):
    """An input file is missing, unreadable, corrupt, truncated, empty or holds no usable record; the message names
    the file and line. A StageError: the stage was given an input it cannot use, which the user fixes, not the code."""

    def __init__(self, path: Path | str, line: int | None, problem: str) -> None:
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")


def iter_json_array(path: Path, chunk_size: int = 1 << 20) -> Iterator[tuple[int, Any]]:
    """Stream the elements of a top-level JSON array as ``(line, element)``, reading ``chunk_size`` characters at a
    time; errors carry the file and the line of the decode position. (The stdlib has no incremental array parser
    and ijson is not a dependency: this is ``raw_decode`` over a sliding buffer.)"""
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8-sig") as fh:  # a byte-order mark is not data
        buf, pos, eof = "", 0, False
        mark, mark_line = 0, 1  # buf[mark] is on line mark_line; positions only move forward, so counting is linear

        def line_at(p: int) -> int:
            nonlocal mark, mark_line
            if p < mark:
                return mark_line - buf.count("\n", p, mark)
            mark_line += buf.count("\n", mark, p)
            mark = p
            return mark_line

        def refill(size: int) -> bool:
            nonlocal buf, eof
            data = fh.read(size)
            eof = not data
            buf += data
            return not eof

        def peek() -> str:
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos].isspace():
                    pos += 1
                if pos < len(buf) or not refill(chunk_size):
                    return buf[pos] if pos < len(buf) else ""

        try:
            if (first_char := peek()) != "[":
                problem = "empty file" if not first_char else "expected a JSON list ('[' at the start of the file)"
                raise InputFileError(path, line_at(pos), problem)
            pos += 1
            first = True
            while True:
                c = peek()
                if c == "]":
                    if first:
                        raise InputFileError(path, line_at(pos), "no records: the JSON list is empty")
                    pos += 1
                    if peek():
                        raise InputFileError(path, line_at(pos), "unexpected data after the end of the JSON list")
                    return
                if not c:
                    raise InputFileError(path, line_at(pos), "truncated file: the JSON list is never closed")
                if not first:
                    if c != ",":
                        raise InputFileError(path, line_at(pos), f"expected ',' or ']' between elements, got {c!r}")
                    pos += 1
                    peek()
                first, size = False, chunk_size
                while True:
                    try:
                        value, end = decoder.raw_decode(buf, pos)
                        break
                    except json.JSONDecodeError as exc:
                        if eof or not refill(size):
                            raise InputFileError(path, line_at(exc.pos), f"invalid JSON: {exc.msg}") from None
                        size *= 2  # a long element: grow reads so re-decoding stays linear overall
                yield line_at(pos), value
                pos = end
                if pos > chunk_size:  # drop the consumed prefix so memory stays bounded by the largest element
                    line_at(pos)
                    buf, pos, mark = buf[pos:], 0, 0
        except UnicodeDecodeError as exc:
            raise InputFileError(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start} of a read)") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line, record)`` for every non-blank line of a JSON Lines file; a file without one is an error."""
    records = 0
    with open(path, "rb") as fh:  # decoded line by line, so a bad byte is reported with its line
        for number, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a byte-order mark is not data
            except UnicodeDecodeError as exc:
                raise InputFileError(path, number, f"not UTF-8 text ({exc.reason} at byte {exc.start + 1})") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                truncated = " (truncated last line?)" if not text.endswith("\n") else ""
                raise InputFileError(path, number, f"invalid JSON: {exc.msg}{truncated}") from None
            records += 1
            yield number, record
    if not records:
        raise InputFileError(path, None, "no records: the file is empty or holds only blank lines")


def all_rejected(n: int, reasons: Counter[str]) -> str:
    """The message for a file whose every record was rejected, with its most common reasons."""
    common = "; ".join(f"{count} {reason}" for reason, count in reasons.most_common(3))
    return f"all {n} records were rejected ({common}); nothing of the file is usable"

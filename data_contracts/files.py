"""Writing files so that a reader, or a killed writer, never sees half of one: every write goes to a temporary
sibling, is flushed to disk, then renamed into place (DESIGN.md section 3). The artifact store publishes whole
directories this way; exports, ``--out`` directories and Data Docs pages use the same helpers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temporary sibling of ``path`` to write, flushed and renamed over ``path`` when the block succeeds; removed
    when it fails. Several writers may race: readers see one whole file or another."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """A fresh temporary sibling of ``path`` to write into, renamed to ``path`` when the block succeeds: all or
    nothing, a failed run leaves no half-written directory."""
    tmp = path.with_name(f".{path.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_frame(frame: pl.DataFrame | Sequence[Mapping[str, Any]], path: Path) -> Path:
    """A frame as Parquet (``.parquet``) or JSON lines (any other suffix; records are written as they are, so
    nested values stay nested), atomically."""
    with atomic_file(path) as tmp:
        if not hasattr(frame, "write_parquet"):
            with tmp.open("w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in frame)
        elif path.suffix == ".parquet":
            frame.write_parquet(tmp)
        else:
            frame.write_ndjson(tmp)
    return path

"""Content digests of the local files and directories a stage reads beside its input artifacts (seed files,
corpora, domain specs, tokenizer and model directories), so an artifact key changes when their content does
(DESIGN.md section 3): a seed file edited in place is never served from the cache.

Hashing is cheap on the second look: a file's digest is remembered under its path, size, mtime, ctime and inode
(in this process, and in ``digests.sqlite`` of the cache directory for the next one) and recomputed only when one
of them changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

CACHE_ENV = "GYMFORGE_CACHE"
_CHUNK = 1 << 20


def canonical_json(value: Any) -> str:
    """The one JSON form of a value that is hashed or compared: keys sorted, no spaces, text as it is (an artifact
    key is the SHA-256 of this form of its inputs, so it must never change)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class LocalInputError(FileNotFoundError):
    """A local input named in a stage's params does not exist or cannot be read."""


class Digest(BaseModel):
    sha256: str
    bytes: int
    files: int


def cache_dir() -> Path:
    """Where gymforge keeps what may be shared across data roots because it is keyed by content:
    ``$GYMFORGE_CACHE``, else ``$XDG_CACHE_HOME/gymforge`` (``~/.cache/gymforge``)."""
    if explicit := os.environ.get(CACHE_ENV):
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gymforge"


_memo: dict[tuple, str] = {}


@cache
def _db() -> sqlite3.Connection | None:
    """The persistent digest cache; None where the cache directory is not writable (then only the memo)."""
    try:
        path = cache_dir()
        path.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path / "digests.sqlite", timeout=30, isolation_level=None, check_same_thread=False)
        con.execute("CREATE TABLE IF NOT EXISTS digests (stamp TEXT PRIMARY KEY, sha256 TEXT NOT NULL)")
        return con
    except (OSError, sqlite3.Error):
        return None


def _file_sha256(path: Path, stat: os.stat_result) -> str:
    stamp = (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)
    if stamp in _memo:
        return _memo[stamp]
    key = repr(stamp)
    con = _db()
    if con is not None:
        with contextlib.suppress(sqlite3.Error):
            if row := con.execute("SELECT sha256 FROM digests WHERE stamp = ?", [key]).fetchone():
                _memo[stamp] = row[0]
                return row[0]
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    _memo[stamp] = h.hexdigest()
    if con is not None:
        with contextlib.suppress(sqlite3.Error):
            con.execute("INSERT OR REPLACE INTO digests VALUES (?, ?)", [key, _memo[stamp]])
    return _memo[stamp]


def digest(path: str | os.PathLike[str]) -> Digest:
    """The content digest of a file, or of a directory (every file under it, by relative path and content;
    hidden files and directories are skipped)."""
    root = Path(path).expanduser().resolve()
    try:
        if root.is_file():
            stat = root.stat()
            return Digest(sha256=_file_sha256(root, stat), bytes=stat.st_size, files=1)
        if not root.is_dir():
            raise LocalInputError(f"{path}: no such file or directory")
        h, size, count = hashlib.sha256(), 0, 0
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            relative = file.relative_to(root)
            if any(part.startswith(".") for part in relative.parts):
                continue
            stat = file.stat()
            h.update(f"{relative.as_posix()}\0{_file_sha256(file, stat)}\0".encode())
            size, count = size + stat.st_size, count + 1
        return Digest(sha256=h.hexdigest(), bytes=size, files=count)
    except PermissionError as exc:
        raise LocalInputError(f"{path}: cannot read {exc.filename}") from None


def digests(paths: Iterable[str | os.PathLike[str]]) -> dict[str, Digest]:
    """Digest per path (as given), in a stable order."""
    return {str(p): digest(p) for p in sorted({str(p) for p in paths})}

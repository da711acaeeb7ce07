"""What a local artifact store and an object store share: the file names of an artifact, how an address is checked,
the Parquet writer settings, the manifest's descriptions of files, and the names of a writer's temporary copies.

The two stores (:mod:`data_contracts.store`, :mod:`data_contracts.objectstore`) differ only in how they commit;
every byte they write and every name they give comes from here, so an artifact copied between them is the same.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from data_contracts.stage import StageError

if TYPE_CHECKING:
    from data_contracts.gate import GateReport

MANIFEST = "manifest.json"
VALIDATION = "validation.json"
TMP = ".tmp-"  # an artifact being written: .tmp-<key>-<host>-<pid>-<nonce>
STALE_AFTER_S = 6 * 3600  # a temp dir from another host cannot be probed by pid; this old means its writer is gone
_KEY = re.compile(r"^[0-9A-Za-z_]+$")  # keys become directory names: nothing that could leave the store
_KEEP_ROW_INDICES = 1000  # failing row indices kept in validation.json; the failing-rows Parquet keeps them all
# Fixed writer settings: identical frames give identical bytes, so a backfill rewrites the same files.
_PARQUET = {"compression": "zstd", "compression_level": 3, "statistics": True, "row_group_size": 128 * 1024}


def address(stage: str, key: str) -> str:
    """``<stage>/<key>``, refusing anything that is not a stage name and a key (it becomes a path)."""
    if not stage.isidentifier() or not _KEY.match(key):
        raise StageError(f"not an artifact address: stage {stage!r} key {key!r} (a stage name and a hex key)")
    return f"{stage}/{key}"


def write_parquet(frame: pl.DataFrame, path: Path) -> int:
    """Write one output with the fixed settings; returns its size in bytes."""
    frame.write_parquet(path, **_PARQUET)
    return path.stat().st_size


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def describe_directory(target: Path) -> dict[str, Any]:
    """A directory output as the manifest lists it: its name, every file's size and SHA-256, the total."""
    files, hashes = {}, {}
    for file in sorted(p for p in target.rglob("*") if p.is_file()):
        relative = file.relative_to(target).as_posix()
        files[relative], hashes[relative] = file.stat().st_size, sha256_file(file)
    return {"name": target.name, "files": files, "sha256": hashes, "bytes": sum(files.values())}


def validation_json(reports: Mapping[str, GateReport]) -> dict[str, Any]:
    """Every report in full, except that row indices beyond the first few are left to the failing-rows files."""
    out = {}
    for name, report in reports.items():
        dumped = report.model_dump(mode="json")
        dumped["failing_rows_total"] = len(report.failing_rows)
        dumped["failing_rows"] = report.failing_rows[:_KEEP_ROW_INDICES]
        out[name] = dumped
    return out


def writer_of(name: str, prefix: str) -> tuple[str, int] | None:
    """(host, pid) of the writer that made a ``.tmp-`` / ``.prev-`` directory, or None for a foreign name."""
    rest = name[len(prefix):].split("-")
    try:
        return "-".join(rest[1:-2]), int(rest[-2])
    except (ValueError, IndexError):
        return None

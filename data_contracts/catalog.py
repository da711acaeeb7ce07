"""The DuckDB catalog (``root/catalog.duckdb``): one row per artifact plus its lineage, for questions like
"what is missing, stale or quarantined" (DESIGN.md section 3).

The manifests on disk are the source of truth; :meth:`Catalog.rebuild` recreates the catalog from them.
DuckDB lets one process write a database file at a time and many Dask worker processes publish concurrently,
so every operation opens a short-lived connection under an ``fcntl`` lock (exclusive to write, shared to read)
and retries with backoff when a process outside that protocol holds the file.

One writer per data root: Dask workers publish manifests only, and the flow driver (the process running the flow)
records the rows of the artifacts it planned, before and after its run (``Catalog.reconcile``). Two drivers on one
data root (two refreshes, a refresh during a backfill) take turns under the lock, and each writes what the disk says,
so neither can leave a row the other contradicts. For a data root on an object store the catalog is a local file
(``<local home>/catalog.duckdb``, see ``data_contracts.objectstore.local_home``): a cache of the manifests, rebuilt
from them on a machine that has none.
"""

from __future__ import annotations

import errno
import fcntl
import json
import random
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import duckdb
import polars as pl

from data_contracts.objectstore import is_remote, local_home, normalized
from data_contracts.store import ArtifactStore

STATUSES = ("published", "quarantined")
_RETRIES = 8
_BACKOFF_S = 0.05

_SCHEMA = """
CREATE TABLE IF NOT EXISTS artifacts (
    key VARCHAR PRIMARY KEY,
    stage VARCHAR NOT NULL,
    version VARCHAR NOT NULL,
    partition VARCHAR NOT NULL,
    params JSON,
    input_keys JSON,
    code_version VARCHAR,
    code_dirty BOOLEAN,
    rows BIGINT,
    bytes BIGINT,
    outputs JSON,
    contract JSON,
    timings JSON,
    status VARCHAR NOT NULL,
    flow_run_id VARCHAR,
    path VARCHAR,
    kind VARCHAR DEFAULT 'data'
);
ALTER TABLE artifacts ADD COLUMN IF NOT EXISTS kind VARCHAR DEFAULT 'data';
CREATE TABLE IF NOT EXISTS lineage (
    key VARCHAR NOT NULL,
    input_stage VARCHAR NOT NULL,
    input_key VARCHAR NOT NULL,
    PRIMARY KEY (key, input_stage)
);
"""

_COLUMNS = ("key, stage, version, partition, params, input_keys, code_version, code_dirty, rows, bytes, outputs, "
            "contract, timings, status, flow_run_id, path, kind")
_ROW_TYPES = (pl.String, pl.String, pl.String, pl.String, pl.String, pl.String, pl.String, pl.Boolean, pl.Int64,
              pl.Int64, pl.String, pl.String, pl.String, pl.String, pl.String, pl.String, pl.String)

_UPSTREAM = """
WITH RECURSIVE up(key, input_stage, input_key, depth) AS (
    SELECT key, input_stage, input_key, 1 FROM lineage WHERE key = ?
    UNION
    SELECT l.key, l.input_stage, l.input_key, up.depth + 1 FROM lineage l JOIN up ON l.key = up.input_key
)
SELECT up.input_stage, up.input_key, min(up.depth) AS depth, any_value(a.status) AS input_status,
       any_value(a.version) AS input_version, any_value(a.partition) AS input_partition
FROM up LEFT JOIN artifacts a ON a.key = up.input_key
GROUP BY up.input_stage, up.input_key
ORDER BY depth, up.input_stage, up.input_key
"""


@dataclass(frozen=True)
class Entry:
    """One artifact as the catalog lists it."""

    key: str
    stage: str
    kind: str  # data | model | index
    status: str  # published | quarantined
    partition: str
    path: str  # relative to the data root
    rows: int
    bytes: int
    flow_run_id: str | None  # the flow run that made it
    params: dict[str, Any]
    input_keys: dict[str, str]  # input stage -> key


_ENTRY_COLUMNS = "key, stage, kind, status, partition, path, rows, bytes, flow_run_id, params, input_keys"


def _entry(row: tuple) -> Entry:
    *head, params, input_keys = row
    return Entry(*head, params=json.loads(params or "{}"), input_keys=json.loads(input_keys or "{}"))


def _is_lock_error(exc: duckdb.Error) -> bool:
    text = str(exc).lower()
    return "lock" in text or "conflicting" in text


class Catalog:
    def __init__(self, root: Path | str) -> None:
        self.root: Any = normalized(str(root)) if is_remote(root) else Path(root)
        home = local_home(root)
        self.path = home / "catalog.duckdb"
        self._lock_path = home / "catalog.lock"

    # --- connections ------------------------------------------------------------------------------------------

    @contextmanager
    def _connect(self, *, write: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        write = write or not self.path.exists()  # the first use creates the file and its tables
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_file(write) as lock:
            if lock is not None:
                fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            con = self._open(read_only=not write)
            try:
                if write:  # cheap, and survives the file being deleted under a long-lived Catalog
                    con.execute(_SCHEMA)
                yield con
            finally:
                con.close()

    @contextmanager
    def _lock_file(self, write: bool) -> Iterator[IO[str] | None]:
        """The lock file, opened to write; a reader on a read-only data root (a copy, a mounted snapshot) reads
        without it, since nothing can write there."""
        try:
            lock = open(self._lock_path, "a+")  # noqa: SIM115 - closed below, after the flock is released
        except OSError as exc:
            if write or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
                raise
            yield None
            return
        try:
            yield lock
        finally:
            lock.close()  # closing releases the flock

    def _open(self, *, read_only: bool) -> duckdb.DuckDBPyConnection:
        """Open the file, retrying with jittered backoff while another (non-cooperating) process holds it."""
        for attempt in range(_RETRIES - 1):
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.Error as exc:
                if not _is_lock_error(exc):
                    raise
                time.sleep(_BACKOFF_S * 2**attempt * (1 + random.random()))
        return duckdb.connect(str(self.path), read_only=read_only)

    # --- writing ------------------------------------------------------------------------------------------------

    @staticmethod
    def _row(manifest: Mapping[str, Any], status: str) -> tuple:
        outputs = manifest.get("outputs", {})
        code = manifest.get("code_version") or {}
        return (
            manifest["key"], manifest["stage"], manifest["version"], manifest["partition"],
            json.dumps(manifest.get("params", {}), sort_keys=True),
            json.dumps(manifest.get("input_keys", {}), sort_keys=True),
            code.get("git_sha", "unknown"), bool(code.get("dirty", False)),
            sum(o.get("rows", 0) for o in outputs.values()),
            sum(o.get("bytes", 0) for o in outputs.values()),
            json.dumps({name: o.get("rows", 0) for name, o in outputs.items()}, sort_keys=True),
            json.dumps(manifest.get("contract", {}), sort_keys=True),
            json.dumps(manifest.get("timings", {}), sort_keys=True),
            status, manifest.get("flow_run_id"),
            ArtifactStore.relative_location(manifest["stage"], manifest["key"], status),
            manifest.get("kind", "data"),
        )

    def _upsert(self, con: duckdb.DuckDBPyConnection, manifest: Mapping[str, Any], status: str) -> None:
        con.execute(f"INSERT OR REPLACE INTO artifacts ({_COLUMNS}) VALUES ({', '.join('?' * len(_COLUMNS.split(',')))})",
                    self._row(manifest, status))
        con.execute("DELETE FROM lineage WHERE key = ?", [manifest["key"]])
        lineage = [(manifest["key"], stage, key) for stage, key in sorted(manifest.get("input_keys", {}).items())]
        if lineage:
            con.executemany("INSERT INTO lineage VALUES (?, ?, ?)", lineage)

    def record(self, manifest: Mapping[str, Any], status: str) -> None:
        """Insert or replace the artifact's row and lineage: recording the same key twice leaves one row. The row's
        ``path`` is relative to the data root."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        with self._connect(write=True) as con:
            con.execute("BEGIN")
            self._upsert(con, manifest, status)
            con.execute("COMMIT")

    def reconcile(self, store: ArtifactStore, addresses: Iterable[tuple[str, str]]) -> None:
        """Make the rows of these (stage, key) artifacts say what the disk says: a run killed between its rename
        and its catalog write left a published artifact without a row (or a row for a copy since replaced)."""
        found = []
        for stage, key in addresses:
            if (artifact := store.get(stage, key)) is not None:
                found.append((key, artifact.manifest, "published"))
            elif (manifest := store.quarantined_manifest(stage, key)) is not None:
                found.append((key, manifest, "quarantined"))
            else:
                found.append((key, None, ""))
        if not found:
            return
        with self._connect(write=True) as con:
            con.execute("BEGIN")
            for key, manifest, status in found:
                if manifest is None:
                    con.execute("DELETE FROM lineage WHERE key = ?", [key])
                    con.execute("DELETE FROM artifacts WHERE key = ?", [key])
                else:
                    self._upsert(con, manifest, status)
            con.execute("COMMIT")

    def rebuild(self, store: ArtifactStore) -> int:
        """Recreate both tables from the manifests on disk; returns the number of artifacts recorded.

        The manifests are read before the lock is taken and inserted in one statement per table: row by row, DuckDB's
        primary-key upserts took 29 s for 1,000 artifacts (bench/bench_scale.py)."""
        rows: dict[str, tuple] = {}
        lineage: dict[str, list[tuple[str, str, str]]] = {}
        for manifest, status in store.manifests():  # a key both published and quarantined: the later one stands
            rows[manifest["key"]] = self._row(manifest, status)
            lineage[manifest["key"]] = [(manifest["key"], stage, key)
                                        for stage, key in sorted(manifest.get("input_keys", {}).items())]
        columns = [name.strip() for name in _COLUMNS.split(",")]
        artifacts = pl.DataFrame(list(rows.values()), schema=dict(zip(columns, _ROW_TYPES, strict=True)),
                                 orient="row")
        links = pl.DataFrame([link for links in lineage.values() for link in links], orient="row",
                             schema={"key": pl.String, "input_stage": pl.String, "input_key": pl.String})
        with self._connect(write=True) as con:
            con.execute("BEGIN")
            con.execute("DELETE FROM lineage")
            con.execute("DELETE FROM artifacts")
            con.register("rebuilt_artifacts", artifacts.to_arrow())
            con.register("rebuilt_lineage", links.to_arrow())
            con.execute(f"INSERT INTO artifacts ({_COLUMNS}) SELECT {_COLUMNS} FROM rebuilt_artifacts")
            con.execute("INSERT INTO lineage SELECT key, input_stage, input_key FROM rebuilt_lineage")
            con.execute("COMMIT")
        return len(rows)

    # --- reading: typed questions, the only way code outside this module asks --------------------------------

    def _rows(self, sql: str, params: list[Any] | None = None) -> list[tuple]:
        with self._connect(write=False) as con:
            return con.execute(sql, params or []).fetchall()

    def entry(self, key: str) -> Entry | None:
        """The artifact with this key, or None when the catalog does not list it."""
        found = self._rows(f"SELECT {_ENTRY_COLUMNS} FROM artifacts WHERE key = ?", [key])
        return _entry(found[0]) if found else None

    def entries(self, *, stage: str | None = None, status: str | None = None,
                kind: str | None = None) -> list[Entry]:
        """The artifacts of a stage, status and kind (None: any), by stage, partition and key."""
        return [_entry(row) for row in self._rows(
            f"SELECT {_ENTRY_COLUMNS} FROM artifacts WHERE (? IS NULL OR stage = ?) AND (? IS NULL OR status = ?) "
            "AND (? IS NULL OR kind = ?) ORDER BY stage, partition, key", [stage, stage, status, status, kind, kind])]

    def latest(self, stage: str) -> Entry | None:
        """The published artifact of ``stage`` recorded last (a rebuild records them in the manifests' order)."""
        found = self._rows(f"SELECT {_ENTRY_COLUMNS} FROM artifacts WHERE stage = ? AND status = 'published' "
                           "ORDER BY rowid DESC LIMIT 1", [stage])
        return _entry(found[0]) if found else None

    def stages(self) -> list[str]:
        """The stages the catalog holds artifacts of, sorted."""
        return [stage for (stage,) in self._rows("SELECT DISTINCT stage FROM artifacts ORDER BY stage")]

    def inputs(self, key: str) -> dict[str, str]:
        """The direct inputs of ``key`` from its lineage: input stage -> input key."""
        return dict(self._rows("SELECT input_stage, input_key FROM lineage WHERE key = ? ORDER BY input_stage", [key]))

    def query(self, sql: str, params: list[Any] | None = None) -> pl.DataFrame:
        """Read-only SQL over ``artifacts`` and ``lineage``: the escape hatch for a person at the console
        (``gymforge artifacts query``). Code asks the typed questions above, so the table layout stays here."""
        with self._connect(write=False) as con:
            return con.sql(sql, params=params).pl()

    def artifacts(self) -> pl.DataFrame:
        return self.query("SELECT * FROM artifacts ORDER BY stage, partition, key")

    def lineage(self, key: str) -> pl.DataFrame:
        """Every upstream artifact of ``key``, recursively, once, with its shortest depth (1 = a direct input) and
        its status (null when the catalog does not know it)."""
        return self.query(_UPSTREAM, [key])

    def stale(self, versions: Mapping[str, str] | None = None) -> pl.DataFrame:
        """Artifacts of a stage version other than the current one (default: the versions registered in
        ``STAGES``), and artifacts of stages no longer registered: candidates to rebuild or remove."""
        if versions is None:
            from data_contracts.stage import STAGES

            versions = {name: declared.version for name, declared in STAGES.items()}
        current = pl.DataFrame({"stage": list(versions), "current_version": list(versions.values())},
                               schema={"stage": pl.String, "current_version": pl.String})
        return (
            self.artifacts()
            .join(current, on="stage", how="left")
            .filter(pl.col("current_version").is_null() | (pl.col("version") != pl.col("current_version")))
        )

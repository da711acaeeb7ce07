"""The artifact store: one directory of Parquet files plus ``manifest.json`` per artifact (DESIGN.md section 3).

Layout under the data root::

    artifacts/<stage>/<key>/{<output>.parquet, manifest.json}     published, read by downstream stages
    artifacts/<stage>/.tmp-<key>-<host>-<pid>-<nonce>/             being written (renamed into place when complete)
    _quarantine/<stage>/<key>/{validation.json, manifest.json, <output>.failing.parquet}

A directory under ``artifacts/`` exists only once every file in it is written and fsynced: a killed writer leaves a
``.tmp-`` sibling (removed by :meth:`ArtifactStore.clean_partial`), never a half-written artifact. Replacing a
published artifact (``--force``) swaps the new directory in with one atomic ``renameat2(RENAME_EXCHANGE)``; where the
filesystem lacks it, the old copy is first renamed to a ``.prev-`` sibling that readers fall back to and that
:meth:`ArtifactStore.clean_partial` puts back if the writer died before the new copy was in place. At every instant
the old or the new artifact is published.

A data root given as a URL (``s3://bucket/prefix``, any fsspec URL) is an object store, where nothing can be renamed:
``open_store(url)`` (:mod:`data_contracts.roots`) gives a :class:`data_contracts.objectstore.ObjectArtifactStore`, which commits by
writing its manifest last. Every manifest lists each file's size and SHA-256, which readers and ``fsck`` check.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl
import psutil

from data_contracts.content import canonical_json, digests
from data_contracts.files import fsync_path
from data_contracts.layout import (
    MANIFEST,
    STALE_AFTER_S,
    TMP,
    VALIDATION,
    address,
    describe_directory,
    sha256_file,
    validation_json,
    write_parquet,
    writer_of,
)
from data_contracts.stage import Params, Stage, StageError

if TYPE_CHECKING:
    from data_contracts.gate import GateReport

_PREV = ".prev-"  # the old copy of an artifact being replaced where RENAME_EXCHANGE is not available
_RENAME_ATTEMPTS = 5


@cache
def code_version() -> dict[str, Any]:
    """Git sha and dirty flag of the checkout this package runs from, computed once per process."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True, check=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {"git_sha": "unknown", "dirty": False}
    return {"git_sha": sha, "dirty": bool(status.strip())}


class RemoteFiles(Protocol):
    """Where a published artifact's files live when the data root is an object store: ``fetch`` copies one file
    into the artifact's local cache directory once, checked against the size and SHA-256 its manifest lists."""

    url: str

    def fetch(self, relative: str, size: int, sha256: str | None) -> Path: ...


@dataclass(frozen=True)
class PublishedArtifact:
    """A published artifact: what a stage receives as an input (satisfies ``data_contracts.stage.Artifact``).

    ``path`` is the artifact's directory; on an object store it is a local cache directory that ``file`` and
    ``directory`` fill on first use from ``remote``."""

    key: str
    stage: str
    path: Path
    manifest: dict[str, Any]
    remote: RemoteFiles | None = None

    @property
    def outputs(self) -> list[str]:
        return list(self.manifest["outputs"])

    @property
    def location(self) -> str:
        """Where the artifact is published: its directory, or its URL on an object store."""
        return str(self.path) if self.remote is None else self.remote.url

    def file(self, output: str) -> Path:
        try:
            entry = self.manifest["outputs"][output]
        except KeyError:
            raise StageError(
                f"artifact {self.stage}/{self.key} has no output {output!r}; it has: {', '.join(self.outputs)}"
            ) from None
        if self.remote is not None:
            return self.remote.fetch(entry["file"], entry["bytes"], entry.get("sha256"))
        return self.path / entry["file"]

    def read(self, output: str) -> pl.DataFrame:
        return pl.read_parquet(self.file(output))

    def scan(self, output: str) -> pl.LazyFrame:
        return pl.scan_parquet(self.file(output))

    @property
    def directory(self) -> Path:
        """The directory output of a ``model`` or ``index`` artifact (a transformers checkpoint, a search index)."""
        described = self.manifest.get("directory")
        if not described:
            raise StageError(f"artifact {self.stage}/{self.key} is a data artifact: it has no directory output")
        if self.remote is not None:
            hashes = described.get("sha256", {})
            for file, size in described["files"].items():
                self.remote.fetch(f"{described['name']}/{file}", size, hashes.get(file))
        return self.path / described["name"]

    @property
    def rows(self) -> dict[str, int]:
        return {name: out["rows"] for name, out in self.manifest["outputs"].items()}

    @property
    def bytes(self) -> int:
        return (sum(out["bytes"] for out in self.manifest["outputs"].values())
                + (self.manifest.get("directory") or {}).get("bytes", 0))


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    fsync_path(path)


def _write_parquet(frame: pl.DataFrame, path: Path) -> int:
    size = write_parquet(frame, path)
    fsync_path(path)
    return size


def _describe(frame: pl.DataFrame) -> dict[str, Any]:
    return {"rows": frame.height, "columns": {col: str(dtype) for col, dtype in frame.schema.items()}}


def _complete(path: Path, manifest: Mapping[str, Any]) -> bool:
    """Every file the manifest lists exists (a published directory someone has since emptied by hand is not)."""
    directory = manifest.get("directory") or {"name": "", "files": {}}
    return (all((path / out["file"]).is_file() for out in manifest.get("outputs", {}).values())
            and all((path / directory["name"] / file).is_file() for file in directory["files"]))


def _move_directory(directory: Path, into: Path) -> dict[str, Any]:
    """Move a stage's directory output into an artifact being written (a rename: same filesystem), fsync its
    files, and describe it for the manifest."""
    target = into / directory.name
    os.rename(directory, target)
    for file in sorted(p for p in target.rglob("*") if p.is_file()):
        fsync_path(file)
    return describe_directory(target)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


@cache
def _renameat2() -> Any:
    return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the C library
    or the filesystem does not support it, and nothing was changed."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


class ArtifactStore:
    """Artifacts under ``root/artifacts/<stage>/<key>/``; quarantined ones under ``root/_quarantine/``.

    ``home`` is the local directory for what cannot live on an object store (the catalog, the Prefect server's
    files, logs, Data Docs): the data root itself when it is a local path."""

    remote = False

    def __init__(self, root: Path | str) -> None:
        self.root: Any = Path(root)
        self.home = self.root
        self.artifacts_dir: Any = self.root / "artifacts"
        self.quarantine_dir: Any = self.root / "_quarantine"

    # --- keys and paths -------------------------------------------------------------------------------------

    @staticmethod
    def artifact_key(stage: Stage, params: Params, input_keys: Mapping[str, str], partition: str) -> str:
        """hash(stage name, version, params, the keys of the inputs it reads, partition, content of the local
        inputs): 20 hex characters of a SHA-256."""
        payload: dict[str, Any] = {
            "stage": stage.name,
            "version": stage.version,
            "params": params.model_dump(mode="json"),
            "inputs": stage.read_keys(params, input_keys),
            "partition": partition,
        }
        if local := digests(params.local_inputs()):  # absent otherwise: keys of stages without any stay as they were
            payload["local_inputs"] = {path: d.sha256 for path, d in local.items()}
        return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:20]

    def path(self, stage: str, key: str) -> Any:
        return self.artifacts_dir / address(stage, key)

    def quarantine_path(self, stage: str, key: str) -> Any:
        return self.quarantine_dir / address(stage, key)

    def location(self, stage: str, key: str, status: str) -> Any:
        """The directory (a URL on an object store) of an artifact with the status :meth:`manifests` gives it."""
        return self.root / self.relative_location(stage, key, status)

    @staticmethod
    def relative_location(stage: str, key: str, status: str) -> str:
        """The artifact's directory relative to the data root (what the catalog keeps, so a copied or moved data
        root reads its own files)."""
        return f"{'artifacts' if status == 'published' else '_quarantine'}/{address(stage, key)}"

    # --- reading --------------------------------------------------------------------------------------------

    def get(self, stage: str, key: str) -> PublishedArtifact | None:
        """The published artifact, or None unless its manifest and every file it lists exist. While a replace
        without RENAME_EXCHANGE has moved the old copy aside and not yet put the new one in place, the old copy is
        the published one."""
        path = self.path(stage, key)

        def candidates() -> Iterator[Path]:
            yield path
            # listed only when the final copy is not complete: a stage directory may hold thousands of keys, and
            # globbing it for every key made Catalog.rebuild quadratic (bench/bench_scale.py)
            yield from sorted(path.parent.glob(f"{_PREV}{key}-*"))

        for candidate in candidates():
            try:
                manifest = json.loads((candidate / MANIFEST).read_text(encoding="utf-8"))
            except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
                continue
            if _complete(candidate, manifest):
                return PublishedArtifact(key=key, stage=stage, path=candidate, manifest=manifest)
        return None

    def quarantined(self, stage: str, key: str) -> Any:
        """Where the quarantined copy is, or None."""
        path = self.quarantine_path(stage, key)
        return path if (path / MANIFEST).is_file() else None

    def validation(self, stage: str, key: str, status: str) -> dict[str, Any] | None:
        """The gate reports an artifact keeps (``validation.json``), or None."""
        try:
            return json.loads((self.location(stage, key, status) / VALIDATION).read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return None

    def quarantined_manifest(self, stage: str, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.quarantine_path(stage, key) / MANIFEST).read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return None

    def manifests(self) -> Iterator[tuple[dict[str, Any], str]]:
        """Every manifest on disk with its status (``published`` or ``quarantined``), in a stable order."""
        keys = {(p.parent.name, p.name.removeprefix(_PREV).split("-")[0])
                for p in self.artifacts_dir.glob("*/*") if not p.name.startswith(TMP)}
        for stage, key in sorted(keys):
            if (artifact := self.get(stage, key)) is not None:
                yield artifact.manifest, "published"
        for manifest_path in sorted(self.quarantine_dir.glob(f"*/*/{MANIFEST}")):
            if manifest_path.parent.name.startswith((TMP, _PREV)):
                continue
            try:
                yield json.loads(manifest_path.read_text(encoding="utf-8")), "quarantined"
            except json.JSONDecodeError:
                continue

    # --- writing --------------------------------------------------------------------------------------------

    @staticmethod
    def manifest(
        stage: Stage,
        key: str,
        *,
        partition: str,
        params: Params,
        input_keys: Mapping[str, str],
        timings: Mapping[str, float] | None = None,
        flow_run_id: str | None = None,
        contract: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The manifest fields known before any file is written (``outputs`` is filled in while writing)."""
        return {
            "stage": stage.name,
            "version": stage.version,
            "kind": stage.kind,
            "resources": stage.resources,
            "key": key,
            "partition": partition,
            "params": params.model_dump(mode="json"),
            "input_keys": stage.read_keys(params, input_keys),
            "local_inputs": {path: d.model_dump() for path, d in digests(params.local_inputs()).items()},
            "code_version": dict(code_version()),
            "outputs": {},
            "timings": {name: round(value, 4) for name, value in (timings or {}).items()},
            "flow_run_id": flow_run_id,
            "contract": dict(contract or {}),
            # tells the writer whose copy won when concurrent writers publish the same key
            "publish_id": uuid.uuid4().hex,
        }

    @staticmethod
    def _temp_name(key: str, prefix: str = TMP) -> str:
        # host and pid let clean_partial tell a live writer's directory from a killed one's
        return f"{prefix}{key}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def _temp_dir(self, parent: Path, key: str) -> Path:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / self._temp_name(key)
        tmp.mkdir()
        return tmp

    def _move_into_place(self, tmp: Path, final: Path, *, replace: bool) -> bool:
        """Rename ``tmp`` to ``final``; False when another writer got there first and ``replace`` is off.

        A replace keeps the old copy readable until the new one is in place: one atomic exchange of the two
        directories, or (without RENAME_EXCHANGE) the old copy renamed to a ``.prev-`` sibling first, which
        readers fall back to and :meth:`clean_partial` restores if this writer dies before the second rename."""
        fsync_path(tmp)
        for _ in range(_RENAME_ATTEMPTS):
            try:
                os.rename(tmp, final)
                break
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            if not replace and self._complete_dir(final):
                shutil.rmtree(tmp, ignore_errors=True)
                return False
            if exchange(tmp, final):  # tmp now holds the old copy (or a broken directory left by hand)
                fsync_path(final.parent)
                shutil.rmtree(tmp, ignore_errors=True)
                return True
            if self._replace_in_two_steps(tmp, final):
                break
        else:
            raise OSError(f"could not move {tmp} into place at {final} after {_RENAME_ATTEMPTS} attempts")
        fsync_path(final.parent)
        return True

    def _replace_in_two_steps(self, tmp: Path, final: Path) -> bool:
        """Old copy aside to ``.prev-``, new copy in, old copy dropped; False when a concurrent writer's rename
        won in between (then its copy stands and the caller tries again)."""
        prev = final.with_name(self._temp_name(final.name, _PREV))
        try:
            os.rename(final, prev)
        except FileNotFoundError:
            return False
        fsync_path(final.parent)
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                os.rename(prev, final)  # put the old copy back before giving up
                raise
            moved = False
        else:
            moved = True
            fsync_path(final.parent)
        shutil.rmtree(prev, ignore_errors=True)
        return moved

    @staticmethod
    def _complete_dir(path: Path) -> bool:
        try:
            return _complete(path, json.loads((path / MANIFEST).read_text(encoding="utf-8")))
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return False

    def _write(
        self,
        final: Path,
        manifest: Mapping[str, Any],
        outputs: Mapping[str, tuple[str, pl.DataFrame, dict[str, Any]]],
        reports: Mapping[str, GateReport] | None,
        *,
        replace: bool,
        directory: Path | None = None,
    ) -> None:
        """Write each output's (file, rows to write, manifest entry), ``validation.json`` unless ``reports`` is
        None, the directory output if any, and the manifest into a temp sibling of ``final``; fsync, rename into
        place."""
        tmp = self._temp_dir(final.parent, manifest["key"])
        try:
            entries = {}
            for name in sorted(outputs):
                file, rows, entry = outputs[name]
                size = _write_parquet(rows, tmp / file)
                entries[name] = {**entry, "bytes": size, "sha256": sha256_file(tmp / file), "file": file}
            if reports is not None:
                _write_json(tmp / VALIDATION, validation_json(reports))
            described = None if directory is None else _move_directory(directory, tmp)
            _write_json(tmp / MANIFEST, {**manifest, "outputs": entries, "directory": described})
            self._move_into_place(tmp, final, replace=replace)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def publish(
        self,
        manifest: Mapping[str, Any],
        frames: Mapping[str, pl.DataFrame],
        *,
        reports: Mapping[str, GateReport] | None = None,
        replace: bool = False,
        directory: Path | None = None,
    ) -> PublishedArtifact:
        """Write every output, the gate reports (``validation.json``, read by the Data Docs), the ``directory``
        output of a model or index stage (moved in) and the manifest.

        A concurrent publisher of the same key that loses the rename drops its copy and returns the winner's,
        whose data files are byte-identical (stages are deterministic; the winner's ``publish_id`` says which copy
        stands). ``replace`` overwrites an existing one.
        """
        stage, key = manifest["stage"], manifest["key"]
        final = self.path(stage, key)
        outputs = {name: (f"{name}.parquet", frame, _describe(frame)) for name, frame in frames.items()}
        self._write(final, manifest, outputs, reports or None, replace=replace, directory=directory)
        published = self.get(stage, key)
        if published is None:  # pragma: no cover - only if someone deletes files between rename and read
            raise RuntimeError(f"artifact {stage}/{key} vanished right after publishing at {final}")
        return published

    def quarantine(
        self,
        manifest: Mapping[str, Any],
        frames: Mapping[str, pl.DataFrame],
        reports: Mapping[str, GateReport],
        directory: Path | None = None,
    ) -> Any:
        """Keep a failed artifact out of ``artifacts/``: its validation result, per output the failing rows (with
        their row index in ``_row``) and the directory output, for inspection. A later quarantine of the same key
        replaces the earlier one."""
        final = self.quarantine_path(manifest["stage"], manifest["key"])
        outputs = {}
        for name, frame in frames.items():
            failing = reports[name].failing_rows if name in reports else []
            indexed = frame.with_row_index("_row")
            outputs[name] = (f"{name}.failing.parquet", indexed[failing] if failing else indexed.head(0),
                             {**_describe(frame), "failing_rows": len(failing)})
        self._write(final, manifest, outputs, reports, replace=True, directory=directory)
        return final

    def scratch(self, stage: str, key: str) -> Path:
        """A fresh temp directory beside the artifact's place, for a directory output to be written into before it
        is gated and published; a killed writer's scratch is cleaned like any ``.tmp-`` directory."""
        return self._temp_dir(self.artifacts_dir / stage, address(stage, key).split("/")[1])

    def remove_quarantine(self, stage: str, key: str) -> None:
        """Drop a quarantined copy once the same key has been published (e.g. after a forced re-run)."""
        shutil.rmtree(self.quarantine_path(stage, key), ignore_errors=True)

    def clean_partial(self, *, stale_after_s: float = STALE_AFTER_S) -> int:
        """Finish what killed writers left: drop their ``.tmp-`` directories (a partial new copy, or the old copy
        an exchange swapped out) and resolve their ``.prev-`` copies (dropped when the new copy is in place, else
        renamed back). A writer is gone when its pid is dead on this host, or its directory from another host is
        older than ``stale_after_s``. Returns how many directories were resolved."""
        host = socket.gethostname()
        resolved = 0
        for base in (self.artifacts_dir, self.quarantine_dir):
            for prefix in (_PREV, TMP):  # a .prev- copy first: it may be the only copy left
                for leftover in sorted(base.glob(f"*/{prefix}*")):
                    writer = writer_of(leftover.name, prefix)
                    if writer == (host, os.getpid()):
                        continue
                    try:
                        age = time.time() - leftover.stat().st_mtime
                    except FileNotFoundError:
                        continue
                    if not ((writer is not None and writer[0] == host and not psutil.pid_exists(writer[1]))
                            or age > stale_after_s):
                        continue
                    final = leftover.with_name(leftover.name[len(prefix):].split("-")[0])
                    if prefix == _PREV and not self._complete_dir(final):
                        with contextlib.suppress(FileNotFoundError):
                            shutil.rmtree(final, ignore_errors=True)
                            os.rename(leftover, final)
                            fsync_path(final.parent)
                    else:
                        shutil.rmtree(leftover, ignore_errors=True)
                    resolved += 1
        return resolved

    def leftovers(self) -> list[Any]:
        """Every ``.tmp-`` and ``.prev-`` directory on disk, whoever wrote it."""
        return sorted(p for base in (self.artifacts_dir, self.quarantine_dir)
                      for prefix in (TMP, _PREV) for p in base.glob(f"*/{prefix}*"))

    def gc(self, older_than_s: float = STALE_AFTER_S) -> list[str]:
        """Remove what writers left uncommitted: a leftover of a dead writer on this host, or any leftover older
        than ``older_than_s``. Returns what was removed, relative to the data root."""
        before = set(self.leftovers())
        self.clean_partial(stale_after_s=older_than_s)
        return sorted(str(Path(p).relative_to(self.root)) for p in before - set(self.leftovers()))

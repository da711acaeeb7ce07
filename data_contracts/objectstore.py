"""A data root on an object store: ``s3://bucket/prefix`` or any fsspec URL (DESIGN.md section 3, "any fsspec URL").

An object store cannot rename, so an artifact is committed by its manifest, written last::

    artifacts/<stage>/<key>/manifest.json                 the commit marker; names the attempt holding the files
    artifacts/<stage>/<key>/<attempt>/<output>.parquet     the files of one write attempt
    _quarantine/<stage>/<key>/...                         the same, for artifacts that failed their contract

A writer uploads every file under a fresh attempt prefix, then the manifest: with a conditional create
(``If-None-Match: *`` on S3) for a first publish, so of two writers of one key exactly one commits and the other
deletes its attempt and returns the winner's artifact; with a plain overwrite for a replace (``--force``) or a
quarantine, whose previous attempt is deleted afterwards. A reader trusts an artifact only when its manifest exists
and every file it lists is there with the listed size; each file's SHA-256 is checked as it is downloaded into the
local cache (``<home>/cache/<stage>/<key>/<attempt>/``), so a corrupt object is an error, never data. Attempts that no
manifest names (a writer killed before its commit, an old copy a replace could not delete) are garbage:
:meth:`ObjectArtifactStore.gc` removes those older than a bound (``gymforge artifacts gc``); the attempt's name
carries its creation time, so no per-object metadata call is needed.

What cannot live on an object store (the DuckDB catalog, the Prefect server's files, logs, Data Docs, scratch space
for directory outputs) lives in a local home directory per data root URL: :func:`local_home`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from data_contracts.content import cache_dir
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
from data_contracts.stage import StageError
from data_contracts.store import ArtifactStore, PublishedArtifact

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

    from data_contracts.gate import GateReport

_ATTEMPT = re.compile(r"^a(\d+)-")  # a<unix ms>-<host>-<pid>-<nonce>
_SECTIONS = ("artifacts", "_quarantine")


_CREDENTIAL_ENV = ("AWS_", "FSSPEC_", "GOOGLE_", "AZURE_")
_filesystems: dict[tuple[str | None, tuple[tuple[str, str], ...]], AbstractFileSystem] = {}


class ObjectStoreError(RuntimeError):
    """The object store of a data root cannot be used (unreachable, refused credentials, no such bucket); the
    message names the URL and what to fix."""


def is_remote(root: Path | str) -> bool:
    """A URL with a scheme other than ``file://`` (``s3://``, ``gs://``, ``memory://``, ...)."""
    text = str(root)
    return "://" in text and not text.startswith("file://")


def normalized(url: str) -> str:
    return str(url).rstrip("/")


def local_home(root: Path | str) -> Path:
    """The local directory of a data root: the root itself for a local path; for a URL a directory under the
    cache (``$GYMFORGE_CACHE/roots/``), one per URL."""
    if not is_remote(root):
        return Path(root)
    url = normalized(str(root))
    slug = re.sub(r"[^A-Za-z0-9]+", "-", url).strip("-")[-48:]
    return cache_dir() / "roots" / f"{slug}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def filesystem(url: str) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem of a URL and the path inside it. Credentials and endpoint come from the environment
    the filesystem's library reads (for S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``),
    or from fsspec's ``FSSPEC_<PROTOCOL>_<OPTION>`` variables."""
    import fsspec

    # fsspec caches filesystems by their arguments, not by the environment their credentials come from
    settings = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_CREDENTIAL_ENV)))
    try:
        protocol, path = fsspec.core.split_protocol(url)
        if (protocol, settings) not in _filesystems:
            _filesystems[(protocol, settings)] = fsspec.filesystem(protocol, skip_instance_cache=True)
        fs = _filesystems[(protocol, settings)]
        path = fs._strip_protocol(url)
    except (ImportError, ValueError) as exc:
        raise ObjectStoreError(f"data root {url}: no filesystem for this URL ({exc}); for s3:// install s3fs") from None
    return fs, path.rstrip("/")


def _endpoint(fs: AbstractFileSystem) -> str:
    configured = (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
    return configured or os.environ.get("AWS_ENDPOINT_URL") or "the default endpoint"


def check_root(url: str) -> None:
    """Write, read back and delete a probe object under the data root: an unreachable endpoint, refused
    credentials or a missing bucket is one ``ObjectStoreError`` naming it, before anything runs."""
    fs, base = filesystem(url)
    probe = f"{base}/.probe-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        fs.pipe_file(probe, b"gymforge")
        fs.cat_file(probe)
        fs.rm_file(probe)
    except FileNotFoundError as exc:
        raise ObjectStoreError(f"data root {url}: the bucket does not exist ({exc}); create it first") from None
    except PermissionError as exc:
        raise ObjectStoreError(f"data root {url}: access denied ({exc}); check the credentials "
                               "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)") from None
    except Exception as exc:  # noqa: BLE001 - connection errors differ per library (botocore, aiohttp, gcsfs)
        raise ObjectStoreError(f"data root {url}: cannot reach the object store at {_endpoint(fs)} "
                               f"({type(exc).__name__}: {exc}); check AWS_ENDPOINT_URL") from None


def _attempt_name() -> str:
    return f"a{int(time.time() * 1000)}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _attempt_age_s(name: str) -> float | None:
    match = _ATTEMPT.match(name)
    return None if match is None else time.time() - int(match.group(1)) / 1000


class _Files:
    """The files of one committed attempt, fetched into a local cache directory on first use (``RemoteFiles``)."""

    def __init__(self, fs: AbstractFileSystem, prefix: str, url: str, cache: Path) -> None:
        self.fs, self.prefix, self.url, self.cache = fs, prefix, url, cache

    def fetch(self, relative: str, size: int, sha256: str | None) -> Path:
        target = self.cache / relative
        if target.is_file() and target.stat().st_size == size:
            return target  # checked when it was downloaded
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part")
        try:
            self.fs.get_file(f"{self.prefix}/{relative}", str(partial))
            got_size = partial.stat().st_size
            got = sha256_file(partial) if sha256 else None
            if got_size != size or got != sha256:
                raise StageError(f"{self.prefix}/{relative} does not match its manifest ({got_size} bytes, sha256 "
                                 f"{got}; the manifest says {size} bytes, sha256 {sha256}): the artifact is corrupt, "
                                 "run `gymforge artifacts fsck --repair`")
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return target


class ObjectArtifactStore(ArtifactStore):
    """The artifact store on an fsspec URL; the same interface as :class:`ArtifactStore`, where paths are URLs."""

    remote = True

    def __init__(self, root: Path | str) -> None:
        self.root = normalized(str(root))
        self.url = self.root
        self.fs, self.base = filesystem(self.root)
        self.home = local_home(self.root)
        self.artifacts_dir = f"{self.root}/artifacts"
        self.quarantine_dir = f"{self.root}/_quarantine"

    # --- addresses ----------------------------------------------------------------------------------------------

    def _dir(self, section: str, stage: str, key: str) -> str:
        return f"{self.base}/{section}/{address(stage, key)}"

    def _url(self, fs_path: str) -> str:
        return self.root + fs_path[len(self.base):]

    def path(self, stage: str, key: str) -> str:
        return f"{self.root}/artifacts/{address(stage, key)}"

    def quarantine_path(self, stage: str, key: str) -> str:
        return f"{self.root}/_quarantine/{address(stage, key)}"

    def location(self, stage: str, key: str, status: str) -> str:
        return f"{self.root}/{self.relative_location(stage, key, status)}"

    def _fs_dir(self, url: str) -> str:
        return self.base + normalized(url)[len(self.root):]

    # --- reading ------------------------------------------------------------------------------------------------

    def _manifest(self, directory: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.fs.cat_file(f"{directory}/{MANIFEST}"))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None

    def _sizes(self, prefix: str) -> dict[str, int]:
        self.fs.invalidate_cache(prefix)  # listings are cached per filesystem instance; another writer may have run
        try:
            return {path: int(info["size"]) for path, info in self.fs.find(prefix, detail=True).items()}
        except FileNotFoundError:
            return {}

    @staticmethod
    def _committed(directory: str, manifest: Mapping[str, Any], sizes: Mapping[str, int]) -> bool:
        """Every file the manifest lists is there with its size (its hash is checked on download)."""
        prefix = f"{directory}/{manifest.get('attempt', '')}"
        described = manifest.get("directory") or {"name": "", "files": {}}
        expected = {f"{prefix}/{out['file']}": out["bytes"] for out in manifest.get("outputs", {}).values()}
        expected |= {f"{prefix}/{described['name']}/{file}": size for file, size in described["files"].items()}
        return "attempt" in manifest and all(sizes.get(path) == size for path, size in expected.items())

    def _artifact(self, stage: str, key: str, directory: str, manifest: dict[str, Any]) -> PublishedArtifact:
        attempt = manifest["attempt"]
        cache = self.home / "cache" / stage / key / attempt
        files = _Files(self.fs, f"{directory}/{attempt}", self._url(directory), cache)
        return PublishedArtifact(key=key, stage=stage, path=cache, manifest=manifest, remote=files)

    def get(self, stage: str, key: str) -> PublishedArtifact | None:
        directory = self._dir("artifacts", stage, key)
        manifest = self._manifest(directory)
        if manifest is None or not self._committed(directory, manifest, self._sizes(f"{directory}/{manifest.get('attempt', '')}")):
            return None
        return self._artifact(stage, key, directory, manifest)

    def quarantined(self, stage: str, key: str) -> str | None:
        return self.quarantine_path(stage, key) if self.quarantined_manifest(stage, key) is not None else None

    def quarantined_manifest(self, stage: str, key: str) -> dict[str, Any] | None:
        return self._manifest(self._dir("_quarantine", stage, key))

    def validation(self, stage: str, key: str, status: str) -> dict[str, Any] | None:
        directory = self._fs_dir(self.location(stage, key, status))
        manifest = self._manifest(directory)
        if manifest is None:
            return None
        try:
            return json.loads(self.fs.cat_file(f"{directory}/{manifest['attempt']}/{VALIDATION}"))
        except (FileNotFoundError, KeyError, json.JSONDecodeError):
            return None

    def manifests(self) -> Iterator[tuple[dict[str, Any], str]]:
        """Every committed manifest with its status: one listing per section and one batched read of the
        manifests (``fs.cat`` fetches them concurrently)."""
        for section, status in zip(_SECTIONS, ("published", "quarantined"), strict=True):
            sizes = self._sizes(f"{self.base}/{section}")
            paths = sorted(p for p in sizes if p.endswith(f"/{MANIFEST}") and p.count("/") - self.base.count("/") == 4)
            contents = self.fs.cat(paths, on_error="omit") if paths else {}
            for path in paths:
                with contextlib.suppress(KeyError, json.JSONDecodeError, UnicodeDecodeError):
                    manifest = json.loads(contents[path])
                    if status == "quarantined" or self._committed(path.rsplit("/", 1)[0], manifest, sizes):
                        yield manifest, status

    # --- writing ------------------------------------------------------------------------------------------------

    def _upload(self, local: Path, remote: str) -> None:
        self.fs.put_file(str(local), remote)

    def _remove(self, prefix: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(prefix, recursive=True)
        self.fs.invalidate_cache(prefix)

    def _write(
        self,
        final: Any,
        manifest: Mapping[str, Any],
        outputs: Mapping[str, tuple[str, pl.DataFrame, dict[str, Any]]],
        reports: Mapping[str, GateReport] | None,
        *,
        replace: bool,
        directory: Path | None = None,
    ) -> None:
        """Upload every file under a fresh attempt, then commit the manifest (conditionally unless ``replace``)."""
        target = self._fs_dir(str(final))
        attempt = _attempt_name()
        prefix = f"{target}/{attempt}"
        tmp = self._temp_dir(self.home / "scratch" / "_upload", manifest["key"])
        try:
            entries = {}
            for name in sorted(outputs):
                file, rows, entry = outputs[name]
                size = write_parquet(rows, tmp / file)
                entries[name] = {**entry, "bytes": size, "sha256": sha256_file(tmp / file), "file": file}
                self._upload(tmp / file, f"{prefix}/{file}")
            if reports is not None:
                (tmp / VALIDATION).write_text(json.dumps(validation_json(reports), indent=2, sort_keys=True,
                                                         default=str) + "\n", encoding="utf-8")
                self._upload(tmp / VALIDATION, f"{prefix}/{VALIDATION}")
            described = None
            if directory is not None:
                described = describe_directory(directory)
                for file in described["files"]:
                    self._upload(directory / file, f"{prefix}/{directory.name}/{file}")
            body = json.dumps({**manifest, "outputs": entries, "directory": described, "attempt": attempt},
                              indent=2, sort_keys=True, ensure_ascii=False, default=str).encode() + b"\n"
            previous = self._commit(target, body, replace=replace)
        except BaseException:
            self._remove(prefix)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if previous is not None:
            self._remove(f"{target}/{previous}")

    def _commit(self, target: str, body: bytes, *, replace: bool) -> str | None:
        """Write the manifest: the commit. Returns the attempt it replaced (to delete); raises FileExistsError when
        a complete copy is already committed and ``replace`` is off (the caller drops its attempt)."""
        previous = self._manifest(target)
        committed = previous is not None and self._committed(
            target, previous, self._sizes(f"{target}/{previous.get('attempt', '')}"))
        if committed and not replace:
            raise FileExistsError(f"{target} is already published")
        # a first publish is a conditional create: of two concurrent writers exactly one commits
        self.fs.pipe_file(f"{target}/{MANIFEST}", body, mode="create" if previous is None else "overwrite")
        self.fs.invalidate_cache(target)
        return None if previous is None else previous.get("attempt")

    def publish(self, manifest: Mapping[str, Any], frames: Mapping[str, pl.DataFrame], **kwargs: Any) -> PublishedArtifact:
        """As :meth:`ArtifactStore.publish`; a writer that finds the key committed by another returns that copy."""
        try:
            return super().publish(manifest, frames, **kwargs)
        except FileExistsError:
            published = self.get(manifest["stage"], manifest["key"])
            if published is None:
                raise
            return published

    def scratch(self, stage: str, key: str) -> Path:
        return self._temp_dir(self.home / "scratch" / stage, address(stage, key).split("/")[1])

    def remove_quarantine(self, stage: str, key: str) -> None:
        self._remove(self._dir("_quarantine", stage, key))

    # --- garbage ------------------------------------------------------------------------------------------------

    def _uncommitted(self) -> Iterator[tuple[str, float | None]]:
        """Every attempt prefix no manifest names, with its age in seconds (None: not an attempt gymforge names)."""
        for section in _SECTIONS:
            sizes = self._sizes(f"{self.base}/{section}")
            attempts: dict[str, set[str]] = {}
            for path in sizes:
                parts = path[len(self.base) + 1:].split("/")
                if len(parts) >= 5:  # section/stage/key/attempt/file...
                    attempts.setdefault("/".join(parts[:3]), set()).add(parts[3])
            manifests = [f"{self.base}/{d}/{MANIFEST}" for d in attempts]
            contents = self.fs.cat(manifests, on_error="omit") if manifests else {}
            for directory, names in sorted(attempts.items()):
                committed = None
                with contextlib.suppress(KeyError, json.JSONDecodeError, UnicodeDecodeError):
                    committed = json.loads(contents[f"{self.base}/{directory}/{MANIFEST}"]).get("attempt")
                for name in sorted(names - {committed}):
                    yield f"{self.base}/{directory}/{name}", _attempt_age_s(name)

    def leftovers(self) -> list[str]:
        """Uncommitted attempts on the object store (whatever their age) and local scratch directories."""
        local = sorted(str(p) for p in (self.home / "scratch").glob("*/.tmp-*"))
        return [self._url(prefix) for prefix, _ in self._uncommitted()] + local

    def gc(self, older_than_s: float = STALE_AFTER_S) -> list[str]:
        """Delete attempts no manifest names that are older than ``older_than_s`` (a writer still uploading is
        younger than the bound) and local scratch left by dead writers; returns the URLs removed."""
        removed = []
        for prefix, age in self._uncommitted():
            if age is not None and age > older_than_s:
                self._remove(prefix)
                removed.append(self._url(prefix))
        scratch = self.home / "scratch"
        for leftover in sorted(scratch.glob("*/.tmp-*")):
            with contextlib.suppress(FileNotFoundError):
                if time.time() - leftover.stat().st_mtime > older_than_s or _dead_local_writer(leftover.name):
                    shutil.rmtree(leftover, ignore_errors=True)
                    removed.append(str(leftover))
        return removed

    def clean_partial(self, *, stale_after_s: float = STALE_AFTER_S) -> int:
        return len(self.gc(stale_after_s))


def _dead_local_writer(name: str) -> bool:
    import psutil

    writer = writer_of(name, TMP)
    return writer is not None and writer[0] == socket.gethostname() and not psutil.pid_exists(writer[1])

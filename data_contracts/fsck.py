"""Check a whole data root: the artifact store and the catalog agree, and nothing half-written is left behind.

``gymforge artifacts fsck`` reports; ``--repair`` fixes what can be fixed without losing a good artifact: leftovers of
killed writers are finished (see :meth:`ArtifactStore.clean_partial`), a published directory whose files are missing
or truncated is removed (its stage rebuilds it), and catalog rows are made to match the manifests on disk.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_contracts.catalog import Catalog
from data_contracts.layout import MANIFEST, sha256_file
from data_contracts.store import ArtifactStore


@dataclass(frozen=True)
class Problem:
    kind: str  # leftover | broken artifact | row without artifact | artifact without row | row out of date
    where: str
    detail: str


def _expected(manifest: dict[str, Any]) -> Iterator[tuple[str, int | None, str | None]]:
    """(file relative to the artifact's files, size, sha256) of every file the manifest lists."""
    for output in manifest.get("outputs", {}).values():
        yield output["file"], output.get("bytes"), output.get("sha256")
    described = manifest.get("directory") or {"name": "", "files": {}}
    hashes = described.get("sha256", {})
    for file, size in described["files"].items():
        yield f"{described['name']}/{file}", size, hashes.get(file)


def _mismatch(file: str, size: int, sha: str, want_size: int | None, want_sha: str | None) -> str | None:
    if want_size is not None and size != want_size:
        return f"{file} has {size} bytes, the manifest says {want_size}"
    if want_sha is not None and sha != want_sha:
        return f"{file} does not match its SHA-256 in the manifest"
    return None


def _broken(path: Path) -> str | None:
    """Why a published directory is not a readable artifact, or None when every file matches its manifest."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no manifest.json"
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "manifest.json is not valid JSON"
    for file, size, sha in _expected(manifest):
        if not (path / file).is_file():
            return f"missing {file}"
        if (why := _mismatch(file, (path / file).stat().st_size, sha256_file(path / file) if sha else "", size, sha)):
            return why
    return None


def _broken_remote(store: Any, directory: str) -> str | None:
    """The same for an artifact on an object store: the files of the attempt its manifest commits."""
    try:
        manifest = json.loads(store.fs.cat_file(f"{directory}/{MANIFEST}"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "manifest.json is not valid JSON"
    sizes = store._sizes(f"{directory}/{manifest.get('attempt', '')}")
    for file, size, sha in _expected(manifest):
        remote = f"{directory}/{manifest.get('attempt', '')}/{file}"
        if remote not in sizes:
            return f"missing {file}"
        digest = hashlib.sha256()
        if sha:
            with store.fs.open(remote, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        if (why := _mismatch(file, sizes[remote], digest.hexdigest() if sha else "", size, sha)):
            return why
    return None


def _broken_artifacts(store: ArtifactStore) -> Iterator[tuple[Any, str, str]]:
    """(what to remove, where relative to the data root, why) for every published artifact that is not readable."""
    if store.remote:
        base = f"{store.base}/artifacts"  # type: ignore[attr-defined]
        for path in sorted(store._sizes(base)):  # type: ignore[attr-defined]
            if path.endswith(f"/{MANIFEST}") and path.count("/") - base.count("/") == 3:
                directory = path.rsplit("/", 1)[0]
                if (why := _broken_remote(store, directory)) is not None:
                    yield directory, directory[len(store.base) + 1:], why  # type: ignore[attr-defined]
        return
    for path in sorted(store.artifacts_dir.glob("*/*")):
        if not path.name.startswith(".") and path.is_dir() and (why := _broken(path)) is not None:
            yield path, str(path.relative_to(store.root)), why


def _relative(store: ArtifactStore, where: Any) -> str:
    text = str(where)
    return text[len(str(store.root)) + 1:] if text.startswith(str(store.root)) else text


def check(store: ArtifactStore, catalog: Catalog) -> list[Problem]:
    problems = [Problem("leftover", _relative(store, p), "left by a writer that did not finish")
                for p in store.leftovers()]
    problems += [Problem("broken artifact", where, why) for _, where, why in _broken_artifacts(store)]
    on_disk = {manifest["key"]: (manifest, status) for manifest, status in store.manifests()}
    rows = {entry.key: (entry.status, entry.path) for entry in catalog.entries()} if catalog.path.exists() else {}
    for key, (status, path) in sorted(rows.items()):
        if key not in on_disk:
            problems.append(Problem("row without artifact", key, f"the catalog lists {path} ({status})"))
        elif (on_disk[key][1], ArtifactStore.relative_location(on_disk[key][0]["stage"], key, on_disk[key][1])) != (
                status, path):
            problems.append(Problem("row out of date", key, f"the catalog says {status} at {path}"))
    for key, (manifest, status) in sorted(on_disk.items()):
        if key not in rows:
            problems.append(Problem("artifact without row", key, f"{manifest['stage']} ({status})"))
    return problems


def repair(store: ArtifactStore, catalog: Catalog) -> None:
    """Finish killed writers' leftovers, drop broken published artifacts, then rebuild the catalog from disk.
    A leftover of a writer still running is left alone."""
    store.clean_partial()
    for target, _, _ in list(_broken_artifacts(store)):
        if store.remote:
            store._remove(target)  # type: ignore[attr-defined]
        else:
            shutil.rmtree(target)
    catalog.rebuild(store)

"""Check a whole data root: the artifact store and the catalog agree, and nothing half-written is left behind.

``gymforge artifacts fsck`` reports; ``--repair`` fixes what can be fixed without losing a good artifact: leftovers of
killed writers are finished (see :meth:`ArtifactStore.clean_partial`), a published directory whose files are missing
or truncated is removed (its stage rebuilds it), and catalog rows are made to match the manifests on disk.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from data_contracts.catalog import Catalog
from data_contracts.store import MANIFEST, ArtifactStore


@dataclass(frozen=True)
class Problem:
    kind: str  # leftover | broken artifact | row without artifact | artifact without row | row out of date
    where: str
    detail: str


def _broken(path: Path) -> str | None:
    """Why a published directory is not a readable artifact, or None when every file matches its manifest."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no manifest.json"
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "manifest.json is not valid JSON"
    for output in manifest.get("outputs", {}).values():
        file = path / output["file"]
        if not file.is_file():
            return f"missing {output['file']}"
        if "bytes" in output and file.stat().st_size != output["bytes"]:
            return f"{output['file']} has {file.stat().st_size} bytes, the manifest says {output['bytes']}"
    return None


def check(store: ArtifactStore, catalog: Catalog) -> list[Problem]:
    problems = [Problem("leftover", str(p.relative_to(store.root)), "left by a writer that did not finish")
                for p in store.leftovers()]
    for path in sorted(store.artifacts_dir.glob("*/*")):
        if path.name.startswith(".") or not path.is_dir():
            continue
        if (why := _broken(path)) is not None:
            problems.append(Problem("broken artifact", str(path.relative_to(store.root)), why))
    on_disk = {manifest["key"]: (manifest, status) for manifest, status in store.manifests()}
    rows = {key: (status, path) for key, status, path in catalog.query(
        "SELECT key, status, path FROM artifacts").iter_rows()} if catalog.path.exists() else {}
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
    """Finish killed writers' leftovers, drop broken published directories, then rebuild the catalog from disk.
    A leftover of a writer still running is left alone."""
    store.clean_partial()
    for path in store.artifacts_dir.glob("*/*"):
        if not path.name.startswith(".") and path.is_dir() and _broken(path) is not None:
            shutil.rmtree(path)
    catalog.rebuild(store)

"""A data root and the artifact store on it: a local directory, or an object store given as a URL."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data_contracts.objectstore import (
    ObjectArtifactStore,
    ObjectStoreError,
    check_root,
    is_remote,
    normalized,
)
from data_contracts.stage import StageError
from data_contracts.store import ArtifactStore

if TYPE_CHECKING:
    from data_contracts.catalog import Catalog
    from data_contracts.store import PublishedArtifact

DATA_ENV = "GYMFORGE_DATA"
"""The data root of every process gymforge starts (``--data-dir`` sets it for the CLI and its children)."""


class DataRootError(ValueError):
    """The data root is not a directory gymforge can use; the message says why."""


def data_root(data_dir: str | os.PathLike[str] | None = None) -> Any:
    """The data root: ``data_dir``, else ``$GYMFORGE_DATA``, else ``./data`` (absolute, created when missing); a URL
    (``s3://bucket/prefix``) stays a URL string."""
    given = str(data_dir or os.environ.get(DATA_ENV) or "data")
    if is_remote(given):
        return normalized(given)
    root = Path(given).expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DataRootError(f"data root {root} is a file, not a directory; set --data-dir or GYMFORGE_DATA to a "
                            "directory") from None
    except NotADirectoryError:
        raise DataRootError(f"data root {root} lies under a file, not a directory; set --data-dir or "
                            "GYMFORGE_DATA to a directory") from None
    except OSError as exc:
        raise DataRootError(f"cannot create the data root {root}: {exc.strerror}") from None
    return root


def writable_data_root(data_dir: str | os.PathLike[str] | None = None) -> Any:
    """The data root, checked to be writable (a run writes artifacts, the catalog and the server's files there);
    an object store is probed with a small object written, read and deleted."""
    root = data_root(data_dir)
    if isinstance(root, str):
        try:
            check_root(root)
        except ObjectStoreError as exc:
            raise DataRootError(str(exc)) from None
        return root
    probe = root / f".write-test-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as exc:
        why = "is on a read-only filesystem" if exc.errno == errno.EROFS else f"is not writable ({exc.strerror})"
        raise DataRootError(f"data root {root} {why}; runs need a writable data root (reading the catalog "
                            "with `gymforge artifacts ls` works without)") from None
    return root




def open_store(root: Path | str) -> ArtifactStore:
    """The artifact store of a data root: an :class:`ObjectArtifactStore` for a URL (``s3://``, any fsspec URL),
    else the local :class:`ArtifactStore`."""
    return ObjectArtifactStore(root) if is_remote(root) else ArtifactStore(root)


def published(catalog: Catalog, store: ArtifactStore, ref: str) -> PublishedArtifact:
    """The published artifact a reference names: its key, or a stage with exactly one published artifact."""
    named = catalog.entry(ref)
    rows = [named] if named is not None else catalog.entries(stage=ref, status="published")
    if not rows:
        raise StageError(f"no artifact {ref!r} in {catalog.path}: give a key from `gymforge artifacts ls`")
    if len(rows) > 1:
        raise StageError(f"stage {ref!r} has {len(rows)} published artifacts ({', '.join(r.key for r in rows)}); "
                         "give one key")
    stage, key, status = rows[0].stage, rows[0].key, rows[0].status
    artifact = store.get(stage, key) if status == "published" else None
    if artifact is None:
        raise StageError(f"artifact {stage}/{key} is {'missing' if status == 'published' else status}; "
                         "run `gymforge artifacts fsck`")
    return artifact

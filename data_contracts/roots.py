"""A data root and the artifact store on it: a local directory, or an object store given as a URL."""

from __future__ import annotations

from pathlib import Path

from data_contracts.objectstore import ObjectArtifactStore, is_remote
from data_contracts.store import ArtifactStore


def open_store(root: Path | str) -> ArtifactStore:
    """The artifact store of a data root: an :class:`ObjectArtifactStore` for a URL (``s3://``, any fsspec URL),
    else the local :class:`ArtifactStore`."""
    return ObjectArtifactStore(root) if is_remote(root) else ArtifactStore(root)

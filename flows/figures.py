"""The writer of stage figures: a stage declares its drawing beside it (``@stage(figure=...)``); after each run the
published artifact's figure is written once as a PNG under ``<data>/figures`` and shown as a markdown artifact in the
Prefect UI (embedded, so it shows without a file server)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from data_contracts.stage import Stage
from data_contracts.store import ArtifactStore


def figure_path(store: ArtifactStore, stage: str, key: str) -> Path:
    return store.home / "figures" / f"{stage}-{key}.png"


def draw_figure(store: ArtifactStore, stage: Stage, key: str) -> Path | None:
    """Draw the figure of a published artifact once (the key pins its content); None for stages without one."""
    artifact = store.get(stage.name, key)
    if stage.figure is None or artifact is None:
        return None
    path = figure_path(store, stage.name, key)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp.png")
        stage.figure(artifact, partial)
        partial.replace(path)  # a reader never sees half a PNG
    return path


def figure_markdown(path: Path, title: str) -> str:
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f"### {title}\n\n![{title}](data:image/png;base64,{encoded})\n\n`{path}`\n"

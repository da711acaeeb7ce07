"""Figures people would rather look at than read: one PNG per stage run under ``<data>/figures`` and the same
image as a markdown artifact in the Prefect UI (embedded, so it shows without a file server)."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path

from data_contracts.stage import Artifact
from data_contracts.store import ArtifactStore
from inference.plotting import save_figure


def _pass_counts(artifact: Artifact, path: Path) -> None:
    from tasks.difficulty import plot_pass_histogram

    plot_pass_histogram(artifact.read("histogram"), path)


def _noise_success(artifact: Artifact, path: Path) -> None:
    from tasks.noise.plot import plot_noise_success
    from tasks.noise.solvability import summary_frame

    plot_noise_success(summary_frame(artifact.read("tasks"), artifact.read("rejected")), path)


def _loss_curve(artifact: Artifact, path: Path) -> None:
    curve = artifact.read("loss_curve")
    with save_figure(path, figsize=(5, 3)) as (_, ax):
        ax.plot(curve["step"].to_list(), curve["loss"].to_list(), color="#4477aa")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (assistant tokens)")
        ax.set_title("tiny_policy")


def _selection(artifact: Artifact, path: Path) -> None:
    from tasks.midtrain.sft_set import plot_selection

    plot_selection(artifact.read("scores"), artifact.read("summary"), path)


FIGURES: dict[str, Callable[[Artifact, Path], None]] = {
    "qa_filtered": _pass_counts,
    "task_filtered": _pass_counts,
    "noisy_tasks": _noise_success,
    "noisy_eval": _noise_success,
    "tiny_policy": _loss_curve,
    "sft_set": _selection,
}


def figure_path(store: ArtifactStore, stage: str, key: str) -> Path:
    return store.home / "figures" / f"{stage}-{key}.png"


def draw_figure(store: ArtifactStore, stage: str, key: str) -> Path | None:
    """Draw the figure of a published artifact once (the key pins its content); None for stages without one."""
    draw = FIGURES.get(stage)
    artifact = store.get(stage, key)
    if draw is None or artifact is None:
        return None
    path = figure_path(store, stage, key)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp.png")
        draw(artifact, partial)
        partial.replace(path)  # a reader never sees half a PNG
    return path


def figure_markdown(path: Path, title: str) -> str:
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f"### {title}\n\n![{title}](data:image/png;base64,{encoded})\n\n`{path}`\n"

"""The one way a figure is drawn and saved: ``with save_figure(path, figsize=(5, 3)) as (fig, ax): ax.plot(...)``.

matplotlib runs headless (files only, never a window, also on a machine with a display), the layout is tightened,
the PNG carries no version stamp (identical input, identical bytes: figures are compared and cached like any
output), and the figure is closed whatever happens in the block."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def save_figure(path: str | Path, nrows: int = 1, ncols: int = 1, *, dpi: int = 100,
                **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """A figure and its axes (``plt.subplots(nrows, ncols, **subplots)``) to draw on; written to ``path`` as PNG
    when the block ends without an error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, dpi=dpi, **subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, metadata={"Software": None})
    finally:
        plt.close(fig)

"""Stage figures: each registered drawing turns a stage's real output shape into a PNG."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from data_contracts.stage import FrameArtifact
from flows.figures import FIGURES, figure_markdown

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

OUTPUTS = {
    "qa_filtered": {"histogram": pl.DataFrame({"pass_count": list(range(9)), "n": [5, 3, 2, 2, 1, 1, 1, 0, 4]})},
    "tiny_policy": {"loss_curve": pl.DataFrame({"step": [10, 20], "loss": [6.0, 2.5]})},
}


@pytest.mark.parametrize("stage", sorted(OUTPUTS))
def test_figure_is_a_png_embedded_in_markdown(stage: str, tmp_path: Path) -> None:
    path = tmp_path / f"{stage}.png"
    FIGURES[stage](FrameArtifact(OUTPUTS[stage]), path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    markdown = figure_markdown(path, stage)
    assert "data:image/png;base64," in markdown and str(path) in markdown


def test_figure_stages_exist() -> None:
    from flows.registry import discover, stage_named

    discover()
    for stage in FIGURES:
        assert stage_named(stage).name == stage

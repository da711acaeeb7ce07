"""Stage figures: a stage declares its drawing beside it (``@stage(figure=...)``), and its figure is written after
each run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from data_contracts.catalog import Catalog
from data_contracts.roots import open_store
from data_contracts.runner import execute_stage
from data_contracts.stage import STAGES, Artifact, Contract, FrameArtifact, Params, Stage, stage
from flows import dag
from flows.figures import figure_markdown, figure_path
from flows.registry import stage_named

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

OUTPUTS = {
    "qa_filtered": {"histogram": pl.DataFrame({"pass_count": list(range(9)), "n": [5, 3, 2, 2, 1, 1, 1, 0, 4]})},
    "tiny_policy": {"loss_curve": pl.DataFrame({"step": [10, 20], "loss": [6.0, 2.5]})},
    "sft": {"metrics": pl.DataFrame({"split": ["train", "train", "eval"], "name": ["loss"] * 3, "step": [1, 2, 2],
                                     "value": [3.0, 2.0, 2.5]})},
}


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_a_declared_figure_is_a_png_embedded_in_markdown(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.png"
    stage_named(name).figure(FrameArtifact(OUTPUTS[name]), path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    markdown = figure_markdown(path, name)
    assert "data:image/png;base64," in markdown and str(path) in markdown


@pytest.mark.parametrize("name", ["qa_filtered", "task_filtered", "noisy_tasks", "noisy_eval", "tiny_policy", "sft_set",
                                  "sft"])
def test_the_stages_declare_their_figures(name: str) -> None:
    assert stage_named(name).figure is not None


class _TestDoubleParams(Params):
    pass


def _test_double_figure(artifact: Artifact, path: Path) -> None:
    path.write_bytes(PNG_MAGIC + str(artifact.read("n")["n"].to_list()).encode())


@pytest.fixture
def figured() -> Iterator[Stage]:
    @stage(name="_test_double_figured", version="1", params=_TestDoubleParams, outputs={"n": Contract()},
           figure=_test_double_figure)
    def figured(inputs, params, partition):
        return {"n": pl.DataFrame({"n": [1, 2]})}

    yield figured
    del STAGES["_test_double_figured"]


def test_a_stages_figure_is_written_after_its_run(figured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(dag, "create_table_artifact", lambda **kwargs: None)
    monkeypatch.setattr(dag, "create_markdown_artifact", lambda markdown, key: shown.append((key, markdown)))
    store = open_store(tmp_path)
    run = execute_stage(store, Catalog(tmp_path), figured, {}, {}, "p0")
    dag._report_run(store, run)
    path = figure_path(store, figured.name, run.key)
    assert path.read_bytes() == PNG_MAGIC + b"[1, 2]"
    assert shown == [("test-double-figured-figure-p0", figure_markdown(path, "_test_double_figured (p0)"))]

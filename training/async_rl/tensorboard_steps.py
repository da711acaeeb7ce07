"""Each RL step's figures as TensorBoard scalars (``report_to: tensorboard``), as TRL reports SFT's: the same
``train/`` tags, so an SFT run and the RL run on its checkpoint read side by side under one ``--logdir``."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any, Self


class TensorBoardSteps:
    """A step callback (``RLRun.on_step``) writing every numeric figure of a step row at its policy version."""

    def __init__(self, directory: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(directory))

    def __call__(self, row: dict[str, Any]) -> None:
        for name, value in row.items():
            if name != "version" and isinstance(value, int | float):
                self.writer.add_scalar(f"train/{name}", float(value), row["version"])
        self.writer.flush()  # a run killed mid-way still leaves the curves of the steps it made

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.writer.close()

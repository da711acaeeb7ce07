"""The progress of a long run (SFT, RL, evaluation, research, experiments): one display for all of them.

A run reports its position and figures to a :class:`RunProgress`. On a terminal that is a live bar on stderr (the
step, the first figures, throughput and ETA) with each reported line printed above it; every reported line also goes to the ``gymforge.progress`` logger and to the
listeners the host process installed with :func:`listening`. That is how a Prefect flow shows the same lines in its
run's Logs tab and keeps live artifacts of them (``flows/live.py``) while the stages themselves import no Prefect.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

Figure = float | int | str
BAR_FIGURES = 3  # the live bar shows the first figures of a line; the line itself has them all

log = logging.getLogger("gymforge.progress")


@dataclass(frozen=True)
class ProgressEvent:
    """One reported line of a run: where it stands and its figures, in the order they were given."""

    run: str  # what kind of run: sft, rl, evaluate, research, experiment
    label: str  # this run among others of its kind, e.g. "evaluate math [1024]"
    completed: int
    total: int | None
    unit: str
    figures: dict[str, Figure] = field(default_factory=dict)
    elapsed_s: float = 0.0
    eta_s: float | None = None
    final: bool = False

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.completed / self.total) if self.total else None

    def text(self) -> str:
        """``loss 5.561  tokens/s 1,234``: the figures as the bar and the log lines show them."""
        return "  ".join(f"{name} {format_figure(value)}" for name, value in self.figures.items())

    def line(self) -> str:
        """``sft step 20/60  loss 5.561  tokens/s 1,234  eta 1m05s``."""
        where = f"{self.completed}/{self.total}" if self.total else str(self.completed)
        parts = [f"{self.label} {self.unit} {where}", self.text()]
        if self.final:
            parts.append(f"done in {format_duration(self.elapsed_s)}")
        elif self.eta_s is not None:
            parts.append(f"eta {format_duration(self.eta_s)}")
        return "  ".join(part for part in parts if part)


def format_figure(value: Figure) -> str:
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value):  # nothing measured yet
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


Listener = Callable[[ProgressEvent], None]
_listeners: list[Listener] = []  # process-wide: a run may report from its worker threads too
_lock = threading.Lock()


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener(event)`` for every line any run of this process reports while the block runs."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)


class RunProgress:
    """The progress of one run: ``update(step, figures)`` as it goes (``log=False`` moves only the bar, not the log
    lines), then ``close``. A context manager; the bar shows only when stderr is a terminal (``bar`` forces it either way)."""

    def __init__(self, run: str, total: int | None, *, unit: str = "step", completed: int = 0,
                 label: str | None = None, bar: bool | None = None) -> None:
        self.run, self.label, self.unit, self.total = run, label or run, unit, total
        self.completed = self.started_at = completed
        self.figures: dict[str, Figure] = {}
        self.start = time.monotonic()
        self._closed = False
        self._bar: Any = None
        if sys.stderr.isatty() if bar is None else bar:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

            columns = (TextColumn(self.label), BarColumn(), MofNCompleteColumn()) if total else (
                SpinnerColumn(), TextColumn(self.label), TextColumn(f"{{task.completed}} {unit}s"))
            self._bar = Progress(*columns, TextColumn("{task.fields[figures]}"), console=Console(stderr=True),
                                 transient=True)
            self._task = self._bar.add_task(self.label, total=total, completed=completed, figures="")
            self._bar.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close(log=kind is None)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def event(self, final: bool = False) -> ProgressEvent:
        elapsed = self.elapsed_s()
        done = self.completed - self.started_at
        eta = (self.total - self.completed) * elapsed / done if self.total and done > 0 else None
        return ProgressEvent(self.run, self.label, self.completed, self.total, self.unit, dict(self.figures),
                             elapsed, eta, final)

    def update(self, completed: int | None = None, figures: Mapping[str, Figure] | None = None, *,
               log: bool = True) -> None:
        """Move to ``completed`` with this line's ``figures`` (they replace the last line's)."""
        if completed is not None:
            self.completed = completed
        if figures is not None:
            self.figures = dict(figures)
        event = self.event()
        if self._bar is not None:
            shown = dataclasses.replace(event, figures=dict(list(event.figures.items())[:BAR_FIGURES]))
            eta = f"  eta {format_duration(event.eta_s)}" if event.eta_s is not None else ""
            self._bar.update(self._task, completed=self.completed, figures=shown.text() + eta)
            if log:  # the whole line scrolls above the bar, as a log would show it
                self._bar.console.print(event.line(), markup=False, highlight=False)
        if log:
            self._report(event)

    def close(self, log: bool = True) -> None:
        """Stop the bar; ``log`` reports the final line (not after a failure: the error says what happened)."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.stop()
        if log:
            self._report(self.event(final=True))

    @staticmethod
    def _report(event: ProgressEvent) -> None:
        log.info(event.line())
        with _lock:
            listeners = list(_listeners)
        for listener in listeners:
            listener(event)

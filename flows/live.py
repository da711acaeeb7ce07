"""A flow run's progress in the Prefect UI, while it runs: every line a run reports (``inference.progress``)
becomes a log line of the flow run (its Logs tab), and each kind of run (sft, rl, evaluate...) keeps two artifacts
updated in place: a progress artifact (percent done; its description the latest figures and ETA) and a table
artifact of every reported line's figures (``<kind>-live-metrics``), so the curve can be read before the run ends.

Updates to the server are at most one every ``MIN_INTERVAL_S`` per kind (the last line always gets through), and
a server that does not answer never stops a training run: the failure is logged once.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from prefect import get_run_logger

from inference.progress import ProgressEvent, format_duration, format_figure, listening

MAX_ROWS = 500  # rows a live table keeps (the newest): the whole curve lives in the artifact's outputs
MIN_INTERVAL_S = 2.0  # seconds between a kind's updates to the server


def artifact_key(run: str, suffix: str) -> str:
    """Prefect artifact keys take lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", f"{run}-{suffix}".lower()).strip("-")


@dataclass
class _Live:
    progress_id: UUID
    table_id: UUID
    rows: list[dict[str, Any]] = field(default_factory=list)
    sent_at: float = 0.0


class LiveProgress:
    """The listener: log lines through the flow run's logger, live artifacts per kind of run."""

    def __init__(self, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.logger = get_run_logger()  # carries the flow run id: usable from the run's worker threads too
        self.min_interval_s = min_interval_s
        self.live: dict[str, _Live] = {}
        self.lock = threading.Lock()
        self.failed = False

    def __call__(self, event: ProgressEvent) -> None:
        self.logger.info(event.line())
        with self.lock:
            try:
                self._update(event)
            except Exception as exc:  # noqa: BLE001 - the UI is a view: never let it stop a training run
                if not self.failed:
                    self.failed = True
                    self.logger.warning("live progress artifacts stopped updating: %s: %s", type(exc).__name__, exc)

    def _update(self, event: ProgressEvent) -> None:
        from prefect.artifacts import create_progress_artifact, create_table_artifact

        live = self.live.get(event.run)
        if live is None:
            live = self.live[event.run] = _Live(
                create_progress_artifact(0.0, key=artifact_key(event.run, "progress"), description=_markdown(event)),
                create_table_artifact([_row(event)], key=artifact_key(event.run, "live-metrics"),
                                      description=f"**{event.run}**: the figures of every reported line, live"))
        live.rows = [*live.rows, _row(event)][-MAX_ROWS:]
        now = time.monotonic()
        if not event.final and now - live.sent_at < self.min_interval_s:
            return
        live.sent_at = now
        self._send(live, event)

    def _send(self, live: _Live, event: ProgressEvent) -> None:
        from prefect import get_client
        from prefect.artifacts import update_progress_artifact
        from prefect.client.schemas.actions import ArtifactUpdate

        fraction = event.fraction
        update_progress_artifact(live.progress_id, 100.0 * (1.0 if event.final else fraction or 0.0),
                                 description=_markdown(event))
        get_client(sync_client=True).update_artifact(live.table_id, ArtifactUpdate(data=json.dumps(_uniform(live.rows))))


def _row(event: ProgressEvent) -> dict[str, Any]:
    figures = {name: _readable(value) for name, value in event.figures.items()}
    return {"run": event.label, event.unit: event.completed, **figures, "elapsed": format_duration(event.elapsed_s)}


def _readable(value: Any) -> Any:
    if not isinstance(value, float):
        return value
    return None if math.isnan(value) else float(f"{value:.4g}")  # NaN: not measured yet


def _uniform(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row with every column seen so far: the UI takes a table's columns from its first row, and a run's
    first line (an evaluation before training) has other figures than its training lines."""
    columns = list(dict.fromkeys(name for row in rows for name in row if name != "elapsed")) + ["elapsed"]
    return [{name: row.get(name) for name in columns} for row in rows]


def _markdown(event: ProgressEvent) -> str:
    where = f"{event.completed} of {event.total}" if event.total else str(event.completed)
    state = "done" if event.final else f"ETA {format_duration(event.eta_s)}" if event.eta_s is not None else "running"
    figures = " | ".join(f"{name} {format_figure(value)}" for name, value in event.figures.items())
    return f"**{event.label}**: {event.unit} {where} ({state})" + (f"  \n{figures}" if figures else "")


@contextmanager
def live_progress() -> Iterator[LiveProgress]:
    """Inside a flow run: what its runs report shows in the run's Logs tab and as live artifacts."""
    listener = LiveProgress()
    with listening(listener):
        yield listener

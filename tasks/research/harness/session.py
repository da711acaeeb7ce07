"""One research run's session: its settings, its append-only journal, and journaled role calls.

The journal is a JSON Lines file written as the run goes: a header naming the run (query, teacher, settings),
then one event per role call (its inputs, every message with tool requests and observations, its output), per
spec decision, per assembly and editorial decision, and the end of the run. It is append-only and resumable: a
run started again on the same journal reuses every recorded call (by call id) and runs only what is missing, and
the decisions it replays on the way (specs, sections, assembly) are not written again; a line cut short by a killed
writer is dropped on reopening. A journal of another run is refused, never mixed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from data_contracts.stage import Params, StageError
from inference.engine import Engine
from tasks.research.harness.roles import RoleCall, RoleConfig, RoleResult, run_roles
from tasks.research.search import SearchIndex

HARNESS = "gymforge-research/2"  # 2: Researchers compose from facts, editors by fact
"""The harness's name and version, recorded with every run."""

Progress = Callable[[str, str, str], None]
"""``progress(role, item, status)``: a role call (or section) started, finished or failed."""


class HarnessConfig(Params):
    roles: RoleConfig = Field(default_factory=RoleConfig, description="how every role call runs (agent loop)")
    writers: int = Field(3, ge=1, le=6, description="Planning Writers, each with its own perspective (report: 3)")
    critic_rounds: int = Field(1, ge=0, le=3, description="Critic/Reviser cycles after the Judge (report: R1)")
    repair_attempts: int = Field(1, ge=0, le=3, description="times a planner is asked to fix an invalid spec "
                                                            "before reverting to the last valid candidate")
    max_sections: int = Field(8, ge=1, le=40, description="dispatchable sections a planner may propose")
    section_attempts: int = Field(2, ge=1, le=5, description="Researcher runs per section when its output is "
                                                             "invalid (no citation, a dangling citation)")
    researcher_workers: int = Field(2, ge=1, le=64, description="Researchers in flight at once without an executor")
    edit: bool = Field(True, description="run the Global Editor and the Local Editors on the assembled draft")
    support_threshold: float = Field(0.6, gt=0.0, le=1.0, description="share of a cited sentence's content terms "
                                                                      "its source must hold (citation support)")

    def fingerprint(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class JournalMismatch(StageError):
    """The journal belongs to another run (another query, teacher or setting)."""


class Journal:
    """The append-only event log of one run; ``path=None`` keeps it in memory."""

    def __init__(self, path: str | os.PathLike[str] | None, header: dict[str, Any]) -> None:
        self.path = Path(path) if path is not None else None
        self.events: list[dict[str, Any]] = []
        if self.path is not None and self.path.exists():
            self.events = _read_events(self.path)
        self._written = {_canonical(e) for e in self.events}
        if self.events:
            recorded = {k: self.events[0].get(k) for k in header}
            if recorded != header:
                diff = ", ".join(k for k in header if recorded.get(k) != header[k])
                raise JournalMismatch(f"{self.path}: the journal records another run (its {diff} differ); "
                                      "use a new journal file or out directory")
        else:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.append({"event": "run", **header})

    def append(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._written.add(_canonical(event))
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(event, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    def append_once(self, event: dict[str, Any]) -> None:
        """Append ``event`` unless the journal holds it already (a resumed run replaying a decision)."""
        if _canonical(event) not in self._written:
            self.append(event)

    def call(self, call_id: str) -> RoleResult | None:
        for event in self.events:
            if event["event"] == "call" and event["result"]["call_id"] == call_id:
                return RoleResult.from_json(event["result"])
        return None

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e["event"] == event), None)

    def calls(self) -> list[RoleResult]:
        return [RoleResult.from_json(e["result"]) for e in self.events if e["event"] == "call"]


def _canonical(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, sort_keys=True)


def _read_events(path: Path) -> list[dict[str, Any]]:
    """The journal's events; a last line cut short by a killed writer is removed from the file."""
    raw = path.read_bytes()
    complete = raw[: raw.rfind(b"\n") + 1]
    if len(complete) != len(raw):
        with path.open("r+b") as fh:
            fh.truncate(len(complete))
    return [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]


class Session:
    """What every phase of a run shares: the teacher, the index, the settings, the journal, the progress."""

    def __init__(self, engine: Engine, index: SearchIndex, config: HarnessConfig, journal: Journal, *,
                 excluded: Sequence[str] = (), engine_ref: Any = None,
                 progress: Progress | None = None) -> None:
        self.engine = engine
        self.index = index
        self.config = config
        self.journal = journal
        self.excluded = tuple(excluded)
        self.engine_ref = engine_ref if engine_ref is not None else engine
        self.progress = progress or (lambda role, item, status: None)

    def role_call(self, call_id: str, role: str, user: str, branch: str | None = None,
                  depends_on: Sequence[str] = ()) -> RoleCall:
        return RoleCall(call_id, role, user, branch, tuple(depends_on), self.excluded)

    def run(self, calls: Sequence[RoleCall]) -> list[RoleResult]:
        """Results of ``calls`` in order: recorded ones from the journal, the others run as one batch."""
        done = {c.call_id: r for c in calls if (r := self.journal.call(c.call_id)) is not None}
        todo = [c for c in calls if c.call_id not in done]
        for c in todo:
            self.progress(c.role, c.branch or c.call_id, "running")
        for result in run_roles(self.engine, self.index, todo, self.config.roles):
            self.record(result)
            done[result.call_id] = result
        return [done[c.call_id] for c in calls]

    def record(self, result: RoleResult) -> None:
        self.journal.append({"event": "call", "result": result.to_json()})
        self.progress(result.role, result.branch or result.call_id, result.status)

    def note(self, event: str, **fields: Any) -> None:
        self.journal.append_once({"event": event, **fields})


class ResearchStop(StageError):
    """The run cannot go on (no evidence for the query, every planner failed, no valid plan); the message says
    why. The run is recorded as failed."""

"""``gymforge`` as its console script runs it, with a test double among the listeners of its runs' progress: each
line a run reports in the middle of its steps waits for a line on stdin before the run goes on (the end of stdin
lets every line through), and says on stdout where it waits. A test thus finds a training run standing in the middle
of its steps, however fast it trains.

    python -m held_progress_double train sft ...

The double listens before the flow's own listeners (``flows/live.py``): while a line waits, they have handled every
line before it and none after."""

from __future__ import annotations

import sys

from flows.cli import main
from inference.progress import ProgressEvent, listening

HELD = "held at"


def hold_in_the_middle(event: ProgressEvent) -> None:
    """Wait for stdin at a line strictly between the first step and the last: ``held at 5/120`` on stdout."""
    if event.final or not event.total or not 0 < event.completed < event.total or sys.stdin.closed:
        return
    print(f"{HELD} {event.completed}/{event.total}", flush=True)
    if not sys.stdin.readline():  # the end of stdin: no more holding
        sys.stdin.close()


if __name__ == "__main__":
    with listening(hold_in_the_middle):
        main()

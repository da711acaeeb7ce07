"""Benchmarks: each ``bench_*.py`` prints its figures and appends them to ``RESULTS.md`` (see DESIGN.md section 10)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def report(lines: Sequence[str], record: bool = True) -> None:
    """Print a benchmark's section and, unless ``record`` is off (``--no-record``), append it to RESULTS.md."""
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write(text)

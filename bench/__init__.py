"""Benchmarks: each ``bench_*.py`` prints its figures and appends them to ``RESULTS.md`` (see DESIGN.md section 10)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
ROOT = Path(__file__).resolve().parents[1]


def report(lines: Sequence[str], record: bool = True) -> None:
    """Print a benchmark's section and, unless ``record`` is off (``--no-record``), append it to RESULTS.md."""
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write(text)


def tree_at(revision: str, into: Path) -> tuple[str, Path]:
    """(short sha, directory) of ``revision``'s tree extracted into ``into`` with git archive, free of uncommitted
    edits: the baseline a benchmark compares the working tree with."""
    into.mkdir(exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", revision], capture_output=True, text=True,
                         check=True).stdout.strip()
    return sha, into

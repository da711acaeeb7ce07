"""Benchmarks: each ``bench_*.py`` prints its figures and appends them to ``RESULTS.md`` (see DESIGN.md section 10)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
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


def add_arm_options(parser: argparse.ArgumentParser, arms: Iterable[str], repeats: int) -> None:
    """The options of a benchmark whose arms run in processes of their own (``run_arms``): ``--repeats`` and
    ``--no-record``, and the hidden ones of one measurement run, ``--arm``, ``--root``, ``--api-url``."""
    parser.add_argument("--repeats", type=int, default=repeats, help="runs per arm (the median is kept)")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to RESULTS.md")
    parser.add_argument("--arm", choices=list(arms), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--api-url", help=argparse.SUPPRESS)


def run_arms(module: str, arms: Iterable[str], repeats: int, *extra: str,
             server: bool = True) -> dict[str, list[dict[str, float]]]:
    """Each arm ``repeats`` times, alternating, each run a fresh ``python -m MODULE --arm NAME --root DIR --api-url
    URL *extra`` process (a process has one fork server and imports once) on a directory of its own, all attached to
    one Prefect server started first (``server``; without one, ``--api-url`` is left out); the figures each run
    printed last, as JSON."""
    from flows.runtime import Runtime

    runs: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    scratch = Path(tempfile.mkdtemp(prefix=f"gymforge-{module.rsplit('.', 1)[-1]}-"))
    try:
        with Runtime(scratch, dask=False) if server else contextlib.nullcontext() as runtime:
            attach = ["--api-url", str(runtime.prefect_api_url)] if server else []
            for repeat in range(repeats):
                for name, measured in runs.items():  # a directory per run: nothing is cached from the one before
                    out = subprocess.run([sys.executable, "-m", module, "--arm", name, "--root",
                                          str(scratch / f"{name}-{repeat}"), *attach, *extra],
                                         capture_output=True, text=True, check=True)
                    measured.append(json.loads(out.stdout.splitlines()[-1]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return runs

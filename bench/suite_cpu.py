"""Where the suite's time goes, per test: a pytest plugin that records each test's wall seconds and the CPU-seconds
of its test process and that process's children around it, and a summary by file (and how busy each test process was).

    .venv/bin/python -m pytest -n 2 --dist loadgroup -p bench.suite_cpu   # writes suite-cpu.jsonl (SUITE_CPU_OUT)
    .venv/bin/python -m bench.suite_cpu suite-cpu.jsonl [--top 25]

CPU is the test process's own, plus its children's that ended and were reaped during the test, plus the growth of
the children still running (a session's Prefect server and Dask workers included). A child reaped later than the
test that ran it is counted at the test that reaped it: read single tests' figures with that in mind, files' less so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

OUT_ENV = "SUITE_CPU_OUT"


def _cpu() -> tuple[float, dict[int, float]]:
    """(CPU-s of this process and its reaped children, {pid: CPU-s} of its children still running)."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    running = {}
    for child in psutil.Process().children(recursive=True):
        try:
            running[child.pid] = sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime, running


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    (before, running_before), start = _cpu(), time.perf_counter()
    yield
    (after, running_after), wall = _cpu(), time.perf_counter() - start
    grown = sum(cpu - running_before.get(pid, 0.0) for pid, cpu in running_after.items())
    with Path(os.environ.get(OUT_ENV, "suite-cpu.jsonl")).open("a") as out:
        out.write(json.dumps({"test": item.nodeid, "wall_s": round(wall, 2),
                              "cpu_s": round(after - before + grown, 2),
                              "process": getattr(item.config, "workerinput", {}).get("workerid", "main")}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="Summarize a suite-cpu.jsonl: CPU and wall by file, then tests.")
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=25, help="files and tests to list")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.path.read_text().splitlines() if line]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        by_file[row["test"].split("::")[0]][0] += row["cpu_s"]
        by_file[row["test"].split("::")[0]][1] += row["wall_s"]
    print(f"{len(rows)} tests: {sum(r['cpu_s'] for r in rows):,.0f} CPU-s, {sum(r['wall_s'] for r in rows):,.0f} s "
          "summed wall")
    busy: dict[str, float] = defaultdict(float)  # a test process's summed wall: how evenly the processes were loaded
    for row in rows:
        busy[row.get("process", "main")] += row["wall_s"]
    print("busy: " + ", ".join(f"{process} {seconds:,.0f} s" for process, seconds in sorted(busy.items())))
    print("\n    CPU-s   wall s  file")
    for name, (cpu, wall) in sorted(by_file.items(), key=lambda item: -item[1][0])[:args.top]:
        print(f"{cpu:9.1f} {wall:8.1f}  {name}")
    print("\n    CPU-s   wall s  test")
    for row in sorted(rows, key=lambda row: -row["cpu_s"])[:args.top]:
        print(f"{row['cpu_s']:9.1f} {row['wall_s']:8.1f}  {row['test']}")


if __name__ == "__main__":
    main()

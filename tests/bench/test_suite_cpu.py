"""bench/suite_cpu.py: a test's line carries the CPU of the children it ran, not a sleeping test's wall, and the
summary adds the lines up by file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TESTS = textwrap.dedent('''
    import subprocess, sys, time

    BURN = "import time\\nstart = time.process_time()\\nwhile time.process_time() - start < 0.5: pass"

    def test_burns_in_a_child():
        subprocess.run([sys.executable, "-c", BURN], check=True)

    def test_sleeps():
        time.sleep(0.5)
''')


def test_a_childs_cpu_is_its_tests_and_the_summary_adds_them_by_file(tmp_path: Path) -> None:
    (tmp_path / "test_burn.py").write_text(TESTS)
    out = tmp_path / "cpu.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "bench.suite_cpu", "-p", "no:cacheprovider",
                          str(tmp_path / "test_burn.py")], cwd=ROOT, env=os.environ | {"SUITE_CPU_OUT": str(out)},
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {row["test"].split("::")[-1]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows["test_burns_in_a_child"]["cpu_s"] >= 0.5  # the child's, reaped within the test
    assert rows["test_sleeps"]["wall_s"] >= 0.5 > rows["test_sleeps"]["cpu_s"] + 0.2

    summary = subprocess.run([sys.executable, "-m", "bench.suite_cpu", str(out)], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    [by_file] = [line for line in summary.splitlines() if line.endswith("test_burn.py")]
    assert by_file.split()[0] == f"{sum(row['cpu_s'] for row in rows.values()):.1f}"
    assert summary.startswith("2 tests: ")
    [busy] = [line for line in summary.splitlines() if line.startswith("busy: ")]
    assert busy == f"busy: main {sum(row['wall_s'] for row in rows.values()):,.0f} s"  # one test process, no xdist

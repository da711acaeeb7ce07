"""bench/suite_processes.py: a process the command starts is counted by its kind, with the CPU it burnt, and the
machine's busy CPU-s covers it."""

from __future__ import annotations

import sys

import pytest

from bench.suite_processes import kind_of, sample, summary

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1.5: pass"


def test_a_childs_cpu_is_counted_under_its_kind() -> None:
    run = sample([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}])"],
                 interval_s=0.2)
    assert run["returncode"] == 0
    burners = [row for row in run["processes"] if "process_time" in row["cmdline"] and "subprocess" not in
               row["cmdline"]]
    assert len(burners) == 1 and burners[0]["cpu_s"] >= 1.0  # sampled at least once near its end
    assert run["busy_cpu_s"] >= burners[0]["cpu_s"] * 0.9
    assert "| python -c / -m (test helpers) |" in summary(run)


@pytest.mark.parametrize(("cmdline", "kind"), [
    ("/v/bin/python -m prefect server start --host 127.0.0.1 --port 4200", "Prefect server"),
    ("/v/bin/python3.11 /v/bin/gymforge --data-dir /d train rl --from x", "gymforge train"),
    ("/v/bin/python3.11 /v/bin/gymforge --data-dir /d --dask-address tcp://h:1 run s", "gymforge run / backfill"),
    ("/v/bin/python3.11 /v/bin/gymforge artifacts ls", "gymforge, other commands"),
    ("/v/bin/python -c from multiprocessing.forkserver import main; main(5, 6, ['training.async_rl.controllers'])",
     "rollout controllers and their fork server"),
    ("/v/bin/python -c from multiprocessing.forkserver import main; main(5, 6, ['distributed', 'polars'], **{})",
     "Dask fork server and workers"),
    ("", "unnamed"),
])
def test_kinds(cmdline: str, kind: str) -> None:
    assert kind_of(cmdline) == kind

"""`python -m bench`: a script that stops at its argument parser is listed as needing arguments, not as failed; any
other non-zero exit fails the run."""

from __future__ import annotations

import subprocess

import pytest

import bench.__main__ as runner


@pytest.mark.parametrize(("codes", "status", "said"), [
    ({"bench_sft": 2}, 0, "need arguments (usage above; `python -m bench.NAME --help`): bench_sft"),
    ({"bench_sft": 2, "bench_gate": 1}, 1, "failed: bench_gate"),
    ({}, 0, ""),
])
def test_exit_status_and_summary(monkeypatch, capsys, codes, status, said):
    ran = []

    def run(cmd, check):
        name = cmd[-1].removeprefix("bench.")
        ran.append(name)
        return subprocess.CompletedProcess(cmd, codes.get(name, 0))

    monkeypatch.setattr(runner.subprocess, "run", run)
    monkeypatch.setattr(runner.sys, "argv", ["bench"])
    assert runner.main() == status
    assert {"bench_sft", "bench_gate", "bench_reading"} <= set(ran)
    err = capsys.readouterr().err
    assert said in err and ("need arguments" in err) == (2 in codes.values())

"""inference/cpu.py: the allocator settings reach this process (mallopt) and the processes it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from inference.cpu import SETTINGS, _glibc_mallopt, tune_allocator

EXPORTED = {name: text for name, _, _, text in SETTINGS}


def test_tune_allocator_is_idempotent_and_exported_to_children(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")  # what a Dask nanny exports to its workers
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    tune_allocator()
    tune_allocator()
    assert {name: os.environ[name] for name in EXPORTED} == EXPORTED
    child = subprocess.run(
        [sys.executable, "-c", f"import json, os; print(json.dumps({{k: os.environ[k] for k in {list(EXPORTED)}}}))"],
        capture_output=True, text=True, check=True,
    )
    assert json.loads(child.stdout) == EXPORTED


@pytest.mark.skipif(_glibc_mallopt() is None, reason="mallopt is glibc's")
def test_glibc_accepts_every_setting() -> None:
    mallopt = _glibc_mallopt()
    assert all(mallopt(option, value) == 1 for _, option, value, _ in SETTINGS)

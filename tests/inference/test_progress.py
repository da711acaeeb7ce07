"""The one progress display of long runs: its lines (step, figures, ETA), its listeners (how the Prefect UI gets
them), and its bar, which only a terminal gets."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference.progress import RunProgress, format_duration, format_figure, listening


def test_a_line_holds_the_step_its_figures_and_the_eta(monkeypatch) -> None:
    clock = iter([100.0, 110.0, 110.0, 130.0, 130.0])
    # a test double of the module's clock only: time.monotonic itself is read by every thread of the process (the
    # session's Dask client, Prefect's services), which would draw from this short iterator too
    monkeypatch.setattr("inference.progress.time", SimpleNamespace(monotonic=lambda: next(clock)))
    events = []
    with listening(events.append):
        progress = RunProgress("sft", 60, completed=20, bar=False)  # resumed at step 20: its ETA counts new steps
        progress.update(30, {"loss": 5.5612, "tokens/s": 1234.6})  # 10 steps in 10 s: 30 left, 30 s
        progress.update(31, {"loss": 5.4}, log=False)  # the bar only
        progress.close()
    assert [e.line() for e in events] == ["sft step 30/60  loss 5.561  tokens/s 1,235  eta 30s",
                                          "sft step 31/60  loss 5.4  done in 30s"]
    assert events[0].fraction == 0.5 and events[-1].final


def test_listeners_hear_only_while_they_listen_and_a_failed_run_logs_no_final_line() -> None:
    heard = []
    with listening(heard.append), pytest.raises(RuntimeError), RunProgress("rl", 3, bar=False) as progress:
        progress.update(1, {"reward": 0.25})
        raise RuntimeError("the run failed")
    RunProgress("rl", 3, bar=False).update(2, {"reward": 0.5})
    assert [(e.completed, e.final) for e in heard] == [(1, False)]


def test_lines_go_to_the_progress_logger_and_an_unknown_total_has_no_eta(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="gymforge.progress"), RunProgress("research", None, unit="call",
                                                                                bar=False) as progress:
        progress.update(4, {"last": "planner writer/1: complete", "running": 2})
    lines = [r.getMessage() for r in caplog.records if r.name == "gymforge.progress"]
    assert lines[0] == "research call 4  last planner writer/1: complete  running 2"
    assert re.fullmatch(r"research call 4  last planner writer/1: complete  running 2  done in \d+s", lines[1])


def test_the_bar_shows_on_a_terminal_only(capsys) -> None:
    with RunProgress("sft", 2, bar=False) as progress:
        progress.update(1, {"loss": 1.0})
    assert capsys.readouterr().err == ""  # stderr is no terminal under pytest: lines go to the logger instead


@given(st.integers(0, 10 * 24 * 3600))
def test_durations_read_back_to_their_seconds(seconds: int) -> None:
    text = format_duration(seconds)
    parts = {unit: int(n) for n, unit in re.findall(r"(\d+)([hms])", text)}
    total = parts.get("h", 0) * 3600 + parts.get("m", 0) * 60 + parts.get("s", 0)
    assert total == seconds or (seconds >= 3600 and seconds - total < 60)  # hours drop the seconds


@pytest.mark.parametrize(("value", "text"), [(5.56123, "5.561"), (12345.6, "12,346"), (3, "3"), (12000, "12,000"),
                                             (float("nan"), "-"), ("sync", "sync"), (True, "True"), (0.000123, "0.000123")])
def test_figures_read_as_people_write_them(value, text) -> None:
    assert format_figure(value) == text

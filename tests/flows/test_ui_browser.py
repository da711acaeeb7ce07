"""The Prefect UI of a gymforge run, opened in headless Chromium: the page of the flow run shows the run, its task
runs and each stage's table artifact, so the UI reaches the API of the server gymforge started; a training run's
Logs tab shows its loss lines and its live artifacts while it runs. With ``GYMFORGE_SCREENSHOTS=DIR`` the pages are
also saved there as PNG files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.dag import refresh

pytestmark = [pytest.mark.browser, pytest.mark.integration]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Without the background-networking flags Chromium keeps dialling Google's hosts, which a closed network refuses.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("GYMFORGE_REQUIRE_BROWSER"):  # set by .ci/run, which installs Debian's chromium
            pytest.fail("chromium is not installed, and GYMFORGE_REQUIRE_BROWSER is set")
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


def _flow_run_id(name: str) -> str:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        [run] = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
    return str(run.id)


def test_the_ui_shows_the_run_its_task_runs_and_artifacts(runtime, browser, tmp_path: Path) -> None:
    profile = tmp_path / "browser.yaml"
    profile.write_text("test_double_source: {n: 3}\n")
    summary = refresh(runtime, profile=str(profile), partition="browser", stages=["test_double_square"])
    square_key = summary[-1]["key"]
    run_id = _flow_run_id("data-refresh browser/browser")

    page = browser.new_page(viewport={"width": 1280, "height": 2400})  # tall: every artifact card renders
    page.goto(f"{runtime.ui_url}/runs/flow-run/{run_id}")
    page.get_by_text("data-refresh browser/browser").first.wait_for(timeout=60_000)
    assert "Can't connect to Server API" not in page.inner_text("body")
    page.get_by_text("Completed").first.wait_for()

    page.get_by_text("Task Runs", exact=True).first.click()
    for stage in ("test_double_source", "test_double_other", "test_double_square"):
        page.get_by_text(f"{stage}/browser").first.wait_for(timeout=30_000)

    page.get_by_text("Artifacts", exact=True).first.click()
    page.get_by_text("test-double-square-browser").first.wait_for(timeout=30_000)
    assert f"key {square_key}" in page.inner_text("body")
    page.close()


def _screenshot(page, tmp_path: Path, name: str) -> Path:
    path = Path(os.environ.get("GYMFORGE_SCREENSHOTS") or tmp_path) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    return path


def _artifacts(run_id: str, key: str) -> list:
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]), key=ArtifactFilterKey(any_=[key])))


def _live_progress(run_id: str) -> float | None:
    """The percent of the run's sft-progress artifact, None before it exists."""
    found = _artifacts(run_id, "sft-progress")
    return float(found[0].data) if found else None


def _artifact_id(run_id: str, key: str) -> str:
    [artifact] = _artifacts(run_id, key)
    return str(artifact.id)


@pytest.mark.slow
def test_a_training_runs_logs_and_live_artifacts_show_while_it_runs(runtime, browser, tmp_path: Path) -> None:
    """Slow (about 30 s on 2 cores) by its subject: a `gymforge train sft` process, and a browser rendering three
    pages of the Prefect UI while the run is held."""
    from sft_fixtures import double_trajectories, micro_base

    from data_contracts.catalog import Catalog
    from data_contracts.roots import open_store
    from data_contracts.runner import execute_stage
    from flows.live import MIN_INTERVAL_S

    data = Path(runtime.root)
    key = execute_stage(open_store(data), Catalog(data), double_trajectories, {}, {}, "ui").key
    base = micro_base(tmp_path / "base")
    env = {**os.environ, "GYMFORGE_DATA": str(data), "PREFECT_API_URL": f"{runtime.ui_url}/api"}
    settings = {"max_steps": 20, "save_steps": 10, "logging_steps": 5, "max_length": 1024, "learning_rate": 3e-3,
                "eval_tool_calls": 2}
    # `gymforge train sft`, with a test double that holds the run at each line in the middle of its steps until
    # this test lets it through: the test sees it running however fast it trains
    command = [sys.executable, "-m", "held_progress_double", "train", "sft", "--data", key, "--base", str(base),
               "--partition", "ui", *(a for n, v in settings.items() for a in ("--set", f"{n}={v}"))]
    log = tmp_path / "training.log"
    launched = datetime.now(UTC)
    with log.open("w") as stderr:
        training = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                    text=True)
    run_id = None
    try:
        _held(training, log)  # at its first line after a step: the flow's listener has not sent it yet
        run_id = _running_run("train-sft base 20 steps", launched)  # renamed once planned
        assert run_id is not None
        time.sleep(MIN_INTERVAL_S)  # past the listener's interval since its last update: it sends the next line
        training.stdin.write("\n")
        training.stdin.flush()
        _held(training, log)  # at its next line, with the one before it sent
        assert 0 < _live_progress(run_id) < 100  # caught in the middle of its steps

        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(f"{runtime.ui_url}/runs/flow-run/{run_id}")
        page.get_by_text("Logs", exact=True).first.click()
        # a training step's line: the step-0 evaluation's ("sft step 0/20  eval_loss ...") may show first
        page.get_by_text("tokens/s").first.wait_for(timeout=60_000)
        body = page.inner_text("body")
        assert "loss" in body and "tokens/s" in body and "eta" in body
        _screenshot(page, tmp_path, "training-logs-tab")
        page.get_by_text("Artifacts", exact=True).first.click()
        page.get_by_text("sft-live-metrics").first.wait_for(timeout=30_000)
        page.get_by_text("sft-progress").first.wait_for(timeout=30_000)
        _screenshot(page, tmp_path, "training-live-artifacts")
        page.goto(f"{runtime.ui_url}/artifacts/artifact/{_artifact_id(run_id, 'sft-live-metrics')}")
        page.get_by_text("sft-live-metrics").first.wait_for(timeout=30_000)
        page.wait_for_timeout(3000)
        _screenshot(page, tmp_path, "training-live-metrics-table")
        assert "tokens/s" in page.inner_text("body")  # the table, as it stood a moment ago
        page.close()
        assert training.poll() is None  # still held: all of the above was seen while it ran
    finally:
        out, _ = training.communicate(timeout=900)  # the end of its stdin lets every line through
    assert training.returncode == 0, out + log.read_text()
    assert _live_progress(run_id) == 100.0


def _held(training: subprocess.Popen, log: Path) -> str:
    """Read the training's stdout up to its next hold (``held at 5/120``)."""
    from held_progress_double import HELD

    while line := training.stdout.readline():
        if line.startswith(HELD):
            return line
    raise AssertionError(f"the training ended (code {training.wait()}) before it was held: {log.read_text()}")


def _running_run(part: str, since: datetime) -> str | None:
    """The id of the flow run whose name contains ``part`` that started running after ``since``. Runs of other
    tests of this process, on the same server, may carry the same name, and a killed one stays "Running"."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, FlowRunFilterStartTime

    started = FlowRunFilterStartTime(after_=since)
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=part),
                                                                   start_time=started))
    assert len(runs) <= 1, [run.name for run in runs]
    return str(runs[0].id) if runs else None

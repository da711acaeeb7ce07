"""The Prefect UI of a gymforge run, opened in headless Chromium: the page of the flow run shows the run, its task
runs and each stage's table artifact, so the UI reaches the API of the server gymforge started."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flows.pipeline import refresh

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

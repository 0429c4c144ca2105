"""A run's report in the Prefect UI, from a machine no report server serves (a pool
worker's case): the report artifact's plots and table render in a real headless Chromium."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.outlets.report_server import REPORTS_URL_ENV
from remedy.state_schema import RunSpec, State
from tests.helpers.browser import CHROMIUM, CHROMIUM_FLAGS, UI_TIMEOUT_MS


@pytest.mark.slow
def test_the_report_shows_in_the_ui_without_a_report_server(
    prefect_api_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    assert REPORTS_URL_ENV not in os.environ  # as on a worker: nothing serves the report
    run_dir = tmp_path / "worker-run"
    final = remediate(
        state=State(run_spec=RunSpec(entry_point="tests.jobs.entry_points.flaky", rules=[])),
        run_dir=str(run_dir),
        settings=RemediateSettings(poll_interval_s=0.3),
        return_state=True,
    )
    response = httpx.post(
        f"{prefect_api_url}/artifacts/filter",
        json={
            "artifacts": {"key": {"any_": ["remedy-worker-run-report"]}},
            "flow_runs": {"id": {"any_": [str(final.state_details.flow_run_id)]}},
            "sort": "CREATED_DESC",
            "limit": 1,
            "offset": 0,
        },
    )
    response.raise_for_status()
    [artifact] = response.json()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(UI_TIMEOUT_MS)
        try:
            ui_url = prefect_api_url.removesuffix("/api")
            page.goto(f"{ui_url}/artifacts/artifact/{artifact['id']}")
            page.get_by_text("remedy run worker-run").first.wait_for()
            plots = page.locator('img[src^="data:image/png;base64,"]')
            plots.first.wait_for()
            assert plots.count() == artifact["data"].count("![plot](data:image/png;base64,")
            for index in range(plots.count()):  # decoded and laid out, not a broken image
                size = plots.nth(index).evaluate("img => [img.naturalWidth, img.naturalHeight]")
                assert size[0] > 100 and size[1] > 100, size
            table = page.locator("table").first
            assert "relaunch_unchanged" in table.inner_text()
            # the table fits the artifact's column: nothing is cut off
            fits = "t => t.scrollWidth <= t.parentElement.clientWidth + 1"
            assert table.evaluate(fits), table.evaluate(
                "t => [t.scrollWidth, t.parentElement.clientWidth]"
            )
            assert f"{run_dir.resolve()}/report/index.html" in page.inner_text("body")
        except Exception:
            page.screenshot(path=tmp_path / "artifact.png", full_page=True)
            raise
        finally:
            browser.close()

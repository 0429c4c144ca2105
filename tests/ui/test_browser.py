"""The Prefect UI in a real headless Chromium: open the deployment, fill a field, run it."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun, StateType
from remedy.state_schema import JobStatus, load_state

from tests.conftest import Served

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The element of one field of Prefect's schema form (its label, help text and input).
FORM_PROPERTY = "contains(concat(' ', @class, ' '), ' schema-form-property ')"
UI_TIMEOUT_MS = 60_000  # one UI step; the machine may be busy
RUN_TIMEOUT_S = 180.0  # the tiny 2-epoch run takes seconds when the machine is idle


def submit_custom_run(ui_url: str, deployment_id: UUID, screenshot: Path) -> UUID:
    """Deployments -> remediate -> Run -> Custom run, Num Epochs = 2, Submit.

    Returns the id of the flow run the form created (from the UI's own API call).
    On a failure the page is saved to `screenshot`.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(UI_TIMEOUT_MS)
            try:
                page.goto(f"{ui_url}/deployments", wait_until="networkidle")
                # Each row links its deployment and its flow, both named remediate here.
                deployment_link = page.locator('a[href^="/deployments/deployment/"]')
                page.get_by_role("link", name="remediate", exact=True).and_(deployment_link).click()
                page.get_by_role("button", name="Run", exact=True).click()
                page.get_by_text("Custom run").click()

                epochs = (
                    page.get_by_text("Num Epochs (Optional)", exact=True)
                    .locator(f"xpath=ancestor::div[{FORM_PROPERTY}][1]")
                    .get_by_role("spinbutton")
                )
                assert epochs.input_value() == "1"  # the served defaults reach the form
                epochs.fill("2")

                # Submit validates the parameters against the deployment's schema, then
                # creates the run and returns to the deployment's page. The browser must
                # stay open until the run exists: the URL alone says nothing (the form's
                # own URL is under the deployment's too).
                with page.expect_response(
                    lambda response: (
                        response.request.method == "POST"
                        and response.url.endswith(f"/deployments/{deployment_id}/create_flow_run")
                    )
                ) as created:
                    page.get_by_role("button", name="Submit", exact=True).click()
                response = created.value
                assert response.status == 201, response.text()
                page.wait_for_url(re.compile(rf"/deployments/deployment/{deployment_id}(\?|$)"))
                return UUID(response.json()["id"])
            except Exception:
                page.screenshot(path=screenshot)
                raise
        finally:
            browser.close()


def wait_until_final(flow_run_id: UUID, timeout: float) -> FlowRun:
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state and flow_run.state.is_final():
                return flow_run
            assert time.monotonic() < deadline, f"the run is still {flow_run.state}"
            time.sleep(0.5)


@pytest.mark.slow
def test_start_a_run_from_the_ui_form(served: Served, tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), "chromium is not installed (./bootstrap.sh --dev does it)"
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("remediate/remediate")

    screenshot = tmp_path / "page.png"
    flow_run_id = submit_custom_run(served.ui_url, deployment.id, screenshot)

    flow_run = wait_until_final(flow_run_id, RUN_TIMEOUT_S)
    assert flow_run.deployment_id == deployment.id
    assert flow_run.parameters["state"]["run_spec"]["num_epochs"] == 2
    assert flow_run.state is not None and flow_run.state.type is StateType.COMPLETED, flow_run.state
    final = load_state(served.runs_dir / flow_run.name / "state.json")
    assert final.run_spec.num_epochs == 2
    assert final.history.attempts[-1].outcome is JobStatus.Completed

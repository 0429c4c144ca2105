"""The Prefect UI in a real headless Chromium: open the deployment, fill a field, run it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun, StateType

from remedy.state_schema import JobStatus, load_state
from tests.conftest import Served
from tests.helpers.browser import CHROMIUM, CHROMIUM_FLAGS, UI_TIMEOUT_MS

# The element of one field of Prefect's schema form (its label, help text and input).
FORM_PROPERTY = "contains(concat(' ', @class, ' '), ' schema-form-property ')"
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
                # a nullable field (null in the served defaults) opens on its typed input:
                # typed into as it is, no type toggle first
                classes = field(page, "Num Classes (Optional)").get_by_role("spinbutton")
                assert classes.input_value() == ""
                classes.fill("10")

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
    assert flow_run.parameters["run_spec"]["num_epochs"] == 2
    assert flow_run.parameters["run_spec"]["num_classes"] == 10
    assert "state" not in flow_run.parameters  # the run's own state lives in its run folder
    assert flow_run.state is not None and flow_run.state.type is StateType.COMPLETED, flow_run.state
    job = flow_run.parameters["run_spec"]["base_job_name"]  # the folder is named after it
    final = load_state(served.runs_dir / f"{job}-{flow_run.name}" / "state.json")
    assert final.run_spec.num_epochs == 2
    assert final.run_spec.num_classes == 10
    assert final.history.attempts[-1].outcome is JobStatus.Completed


def field(page: Any, label: str) -> Any:
    """The schema form's property whose label is `label` (its input, help and menu)."""
    return page.get_by_text(label, exact=True).locator(f"xpath=ancestor::div[{FORM_PROPERTY}][1]")


def assert_shown_in_order(text: str, fields: dict[str, Any]) -> None:
    """Every field's label appears in `text`, in the order of the fields' "position" (the
    UI labels a field by its schema title; a model's own fields without positions, in their
    order)."""
    by_position = sorted(fields.values(), key=lambda field: field.get("position", 0))
    titles = [f"{field['title']} (Optional)" for field in by_position]
    assert [title for title in titles if title not in text] == []
    indices = [text.index(title) for title in titles]
    shown = [title for _, title in sorted(zip(indices, titles, strict=True))]
    assert shown == titles


def whole_form_screenshot(page: Any, path: Path) -> int:
    """A screenshot of the whole page, the form included to its end: Prefect's layout
    scrolls in an inner element, which a full-page screenshot alone cuts at the window.
    Returns the height it had to show."""
    height = page.evaluate(
        "Math.max(...Array.from(document.querySelectorAll('*'), e => e.scrollHeight))"
    )
    page.set_viewport_size({"width": 1400, "height": min(height + 100, 30_000)})
    page.screenshot(path=path, full_page=True)
    return int(height)


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[16:24]  # the IHDR chunk: width, height
    return int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")


# The State fields the flow keeps up to date: a person starting a run never sets them.
FLOW_OWN_FIELDS = (
    "state",
    "history",
    "next_action",
    "job_status",
    "rule_status",
    "findings",
    "planned_change",
    "end_reason",
)


@pytest.mark.slow
def test_the_run_form_holds_only_what_a_person_chooses(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A remediate deployment with no defaults of its own, as `remedy serve` registers it:
    Run -> Custom run shows run_spec, budgets, policy (a dropdown of the registered
    policies), policy_config, settings and run_dir, with the flow's defaults in place."""
    from playwright.sync_api import sync_playwright

    from remedy.flows.deployments import remediate_deployment
    from remedy.strategies import POLICIES

    deployment = remediate_deployment()
    deployment.name = "form-check"
    deployment_id = deployment.apply()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(UI_TIMEOUT_MS)
        try:
            ui_url = prefect_api_url.removesuffix("/api")
            page.goto(f"{ui_url}/deployments/deployment/{deployment_id}/run")
            page.get_by_text("Num Epochs (Optional)", exact=True).wait_for()
            text = page.inner_text("body")
            for name in ("run_spec", "budgets", "policy", "policy_config", "settings", "run_dir"):
                assert f"{name} (Optional)" in text, name
            for name in FLOW_OWN_FIELDS:
                title = name.replace("_", " ").title()
                assert f"{name} (Optional)" not in text, name
                assert f"{title} (Optional)" not in text, title
            # run_spec's fields in the order of the schema the flow's types give (the same
            # wherever the deployment is registered): the job, then the backend, then each
            # backend's group; nothing a strategy sets
            with get_client(sync_client=True) as client:
                schema = client.read_deployment(deployment_id).parameter_openapi_schema
            assert_shown_in_order(text, schema["definitions"]["RunSpec"]["properties"])
            for title in ("Start Epoch", "Init Checkpoint", "Skip Steps", "Exclude Samples"):
                assert f"{title} (Optional)" not in text, title
            # each backend's fields: one collapsed section, opened by choosing it
            assert "Sm Role (Optional)" not in text and "Partition (Optional)" not in text
            cloud = field(page, "SageMaker (Optional)")
            cloud.get_by_role("button", name="SageMaker", exact=True).click()
            page.get_by_text("Sm Role (Optional)", exact=True).wait_for()
            # its fields' descriptions may render a moment after their labels
            page.get_by_text("shows as <hidden> once the run starts").first.wait_for()
            text = page.inner_text("body")
            assert_shown_in_order(text, schema["definitions"]["RunSpec"]["properties"])
            cloud = schema["definitions"]["RunSpec"]["properties"]["sagemaker"]["anyOf"][0]
            cloud_fields = schema["definitions"][cloud["$ref"].rsplit("/", 1)[-1]]["properties"]
            assert_shown_in_order(text, cloud_fields)
            assert text.index("Backend (Optional)") < text.index("Sm Role (Optional)")
            assert "shows as <hidden> once the run starts" in text  # a description's <...>
            assert "Partition (Optional)" not in text  # slurm's section stays closed
            # a nullable field opens on its typed input, typed into without the type toggle
            source_dir = field(page, "Source Dir (Optional)").get_by_role("textbox")
            source_dir.fill("examples")
            assert source_dir.input_value() == "examples"
            run_dir = field(page, "run_dir (Optional)").get_by_role("textbox")  # no toggle
            assert run_dir.input_value() == ""  # empty: the folder named after the job
            run_dir.fill("runs/mine")
            assert run_dir.input_value() == "runs/mine"
            # what a person sees, the whole form, kept with the test's files (tmp_path)
            height = whole_form_screenshot(page, tmp_path / "form.png")
            assert png_size(tmp_path / "form.png")[1] >= height > 1000

            # the defaults are in place, 0 included
            batch_norm = field(page, "Add Batch Norm (Optional)").get_by_role("spinbutton")
            assert batch_norm.input_value() == "0"
            retraining = field(page, "Max Num Retraining (Optional)").get_by_role("spinbutton")
            assert retraining.input_value() == "30"

            # policy: a dropdown of the registered policies, adaptive by default
            policy = field(page, "policy (Optional)")
            assert policy.locator(".p-select-button__value").inner_text() == "adaptive"
            policy.locator("button.p-select-button__control").focus()
            page.keyboard.press("ArrowDown")  # opens the list (a click in headless does not)
            page.get_by_role("option").first.wait_for()
            options = page.get_by_role("option").all_inner_texts()
            # The built-in policies, and only registered ones (a test may have registered
            # more in this process after the form's choices were made).
            shown = {option.strip() for option in options}
            assert {"adaptive", "config", "seed"} <= shown <= set(POLICIES), shown
        except Exception:
            whole_form_screenshot(page, tmp_path / "form.png")
            raise
        finally:
            browser.close()

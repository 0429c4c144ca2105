"""Runs triggered through the Prefect API, as the UI does, against `remedy serve`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment
from prefect.states import Cancelling

from jobs.local import LocalBackend
from state_schema import JobStatus, load_state
from tests.conftest import Served


def wait_for(condition: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.3)


def spec(entry: str) -> dict:
    return {"run_spec": {"entry_point": f"tests.jobs.entry_points.{entry}", "rules": []}}


@pytest.mark.slow
def test_a_run_started_from_the_api_completes(served: Served, tmp_path: Path) -> None:
    run_dir = tmp_path / "from-ui"
    flow_run = run_deployment(
        "remediate/remediate",
        parameters={
            "state": spec("quick"),
            "run_dir": str(run_dir),
            "settings": {"poll_interval_s": 0.3},
        },
        timeout=180,
    )
    assert flow_run.state.type is StateType.COMPLETED, flow_run.state
    final = load_state(run_dir / "state.json")
    assert final.history.attempts[0].outcome is JobStatus.Completed


@pytest.mark.slow
def test_cancelling_a_deployment_run_stops_its_job(served: Served, tmp_path: Path) -> None:
    run_dir = tmp_path / "cancel-me"
    flow_run = run_deployment(
        "remediate/remediate",
        parameters={
            "state": spec("gated"),
            "run_dir": str(run_dir),
            "settings": {"poll_interval_s": 0.3},
        },
        timeout=0,
    )

    def training() -> bool:
        path = run_dir / "state.json"
        job = load_state(path).history.latest_job_name if path.exists() else None
        return bool(job) and (run_dir / "jobs" / job / "progress.json").exists()

    wait_for(training)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run.id, Cancelling(message="from the UI"))
        wait_for(lambda: client.read_flow_run(flow_run.id).state.type is StateType.CANCELLED)
    job = load_state(run_dir / "state.json").history.latest_job_name
    backend = LocalBackend(run_dir)
    wait_for(lambda: backend.describe(job)["TrainingJobStatus"] == "Stopped", timeout=60)


def test_the_overnight_search_is_scheduled_at_one(served: Served) -> None:
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("search/overnight")
    (schedule,) = deployment.schedules
    assert schedule.schedule.cron == "0 1 * * *"
    assert schedule.schedule.timezone == "UTC"
    assert schedule.active

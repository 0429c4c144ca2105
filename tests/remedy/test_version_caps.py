"""What the version caps in pyproject.toml keep working, on the session's real server.

fastapi <0.151: test_prefect_clients_default_queries_are_accepted in
tests/remedy/test_prefect_commands.py.
"""

from __future__ import annotations

import time
from datetime import timedelta
from uuid import uuid4

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import DeploymentScheduleCreate
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.client.schemas.schedules import IntervalSchedule


def test_a_scheduled_deployment_gets_runs(prefect_api_url: str) -> None:
    # sqlalchemy <2.1: with SQLAlchemy 2.1 prefect 3.8's scheduler fails on every loop
    # ("Can't evaluate bulk DML statement") and a schedule (the overnight search) never runs.
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name(f"caps-{uuid4().hex[:8]}")
        deployment_id = client.create_deployment(
            flow_id=flow_id,
            name="hourly",
            entrypoint="nowhere.py:nothing",
            # no work pool: nobody runs it, the scheduler only plans its runs (an hour apart)
            schedules=[
                DeploymentScheduleCreate(schedule=IntervalSchedule(interval=timedelta(hours=1)))
            ],
        )
        try:
            wanted = DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
            deadline = time.monotonic() + 120  # the scheduler's loops: seconds on an idle machine
            runs = []
            while not runs and time.monotonic() < deadline:
                runs = client.read_flow_runs(deployment_filter=wanted, limit=5)
                time.sleep(1)
            assert runs, "the scheduler planned no run of a scheduled deployment"
            assert all(run.state and run.state.is_scheduled() for run in runs)
        finally:
            client.delete_deployment(deployment_id)

"""The test session's server is `remedy server --database-url postgresql+asyncpg://...`
against a real PostgreSQL from Debian's packages (tests/conftest.py, tests/postgres.py):
what it records lands in PostgreSQL, in the `prefect` database owned by the `prefect` role,
as infra/README.md sets it up."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect import flow, task

from tests.postgres import ROLE, Postgres


@task
def double(x: int) -> int:
    return 2 * x


@flow(name="postgres-check")
def check() -> int:
    return double(21)


@pytest.mark.slow
def test_remedy_server_keeps_flow_runs_in_postgresql(
    prefect_api_url: str, postgres: Postgres, prefect_home: Path
) -> None:
    owner = "SELECT tableowner FROM pg_tables WHERE tablename = 'flow_run'"
    assert postgres.psql(owner, as_owner=True) == ROLE  # Prefect made its tables there

    assert check() == 42

    rows = postgres.psql(
        "SELECT flow_run.state_type, "
        "(SELECT count(*) FROM task_run WHERE task_run.flow_run_id = flow_run.id) "
        "FROM flow_run JOIN flow ON flow.id = flow_run.flow_id "
        "WHERE flow.name = 'postgres-check'",
        as_owner=True,
    )
    assert rows == "COMPLETED|1"
    assert not list(prefect_home.glob("*.db")), "a SQLite database was made"

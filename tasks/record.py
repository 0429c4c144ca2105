"""record: open a run folder, and save each transition of the run to it and to the UI."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from remedy.records.publish import publish_attempts
from remedy.records.run_folder import default_run_dir, persist
from remedy.state_schema import State


@task(cache_policy=NO_CACHE)
def open_run(state: State, run_dir: str | None, flow_run_name: str) -> str:
    """The run's folder (default: named after the flow run) with the starting state in it."""
    run_dir = run_dir or default_run_dir(flow_run_name)
    persist(run_dir, state, "start")
    return run_dir


@task(cache_policy=NO_CACHE)
def record(state: State, run_dir: str, event: str) -> None:
    """state.json and the journal after a transition; the attempt table in the UI."""
    persist(run_dir, state, event)
    publish_attempts(state, run_dir)

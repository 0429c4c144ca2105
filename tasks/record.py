"""record: open a run folder, and save each transition of the run to it and to the UI."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.states import Cancelled, Failed

from remedy.outlets.messages import redact
from remedy.outlets.publish import hide_parameters, publish_attempts
from remedy.records.logs import quiet_task_runs
from remedy.records.run_folder import (
    FINISHED,
    holds_run,
    job_run_dir,
    lock_run,
    open_run_folder,
    persist,
    run_dir_of,
    unlock_run,
)
from remedy.records.verdict import run_flaw
from remedy.state_schema import State

__all__ = [
    "final_state",
    "finish",
    "hide_parameters",
    "open_run",
    "prepare_run",
    "quiet_task_runs",
    "record",
    "release_run",
]


@task(cache_policy=NO_CACHE)
def open_run(state: State, run_dir: str | None, flow_run_name: str) -> tuple[str, State]:
    """The run's folder (default: named after the job and the flow run), locked for this
    process, and the state to go on from: the given one for a new run, the saved one when the folder
    holds this run already (a retry, a resume). Another run in the folder is refused."""
    run_dir = run_dir or job_run_dir(state.run_spec.base_job_name, flow_run_name)
    # `remedy run`/`resume` opened it in this process already, and journaled it then.
    opened_here = holds_run(run_dir)
    lock_run(run_dir, f"flow run {flow_run_name}")
    try:
        return run_dir, open_run_folder(run_dir, state, journal=not opened_here)
    except Exception:
        unlock_run(run_dir)
        raise


def prepare_run(state: State, run_dir: str) -> State:
    """Write a new run's folder before its flow starts, so the flow can be given the state
    with its private fields hidden (its parameters show in the UI): it finds them here."""
    return open_run_folder(run_dir, state)


def record(state: State, run_dir: str, event: str) -> None:
    """state.json and the journal after a transition; the attempt table in the UI once per
    attempt, when it is launched (the one before with its outcome, finding and change; the
    progress artifact shows the attempt as it goes, announce_end the last one's end). Not
    a task: a task run per transition would be most of a run's task runs, and all alike."""
    persist(run_dir, state, event)
    if event == "train":
        publish_attempts(state, run_dir)


@task(cache_policy=NO_CACHE)
def finish(state: State, run_dir: str) -> None:
    """Nothing of the run is left to do (a resume now only reports): journal it, unlock."""
    persist(run_dir, state, FINISHED)
    unlock_run(run_dir)


def final_state(state: State) -> State | Any:
    """What the flow run ends in: the payload when the run is clean (records/verdict.py),
    else Cancelled or Failed with the end reason as its message and the payload as its data,
    so dashboards, the Failed filter, automations and run_deployment callers see the truth."""
    if (state.end_reason or "").startswith("cancelled"):
        return Cancelled(message=state.end_reason, data=state)
    flaw = run_flaw(state)
    if flaw is not None:
        return Failed(message=redact(state.end_reason or flaw), data=state)
    return state


def release_run(flow: Any, flow_run: Any, state: Any) -> None:
    """Flow hook: a flow run that fails, crashes or is cancelled leaves its run unlocked
    (a process that dies drops the lock anyway)."""
    unlock_run(run_dir_of(flow_run.parameters or {}, flow_run.name))

"""stop_job: stop the current job (graceful, then forced) and record how it ended."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.decisions.observe import record_end, record_progress
from remedy.jobs import JobBackend, backend_for
from remedy.records.asked_early import next_hold_point
from remedy.records.logs import task_logger
from remedy.records.run_folder import load_run, run_dir_of, state_path
from remedy.state_schema import NextAction, State
from remedy.state_schema.transitions import update_current_attempt
from remedy.strategies.still_descending import is_held as is_held  # the flow asks it
from remedy.tasks.retry import BACKEND_RETRIES


@task(cache_policy=NO_CACHE, **BACKEND_RETRIES)  # an outage of the backend is retried
def stop_job(state: State, run_dir: str) -> State:
    job_name = state.history.latest_job_name
    if job_name is None:
        return state
    backend = backend_for(state.run_spec.backend, run_dir)
    backend.stop(job_name)
    snapshot = backend.describe(job_name)
    task_logger().info("job %s is %s", job_name, snapshot.status.value)
    state = record_end(
        record_progress(state, snapshot), snapshot, backend.metrics_location(job_name)
    )
    return state.model_copy(update={"job_status": snapshot.status})


@task(cache_policy=NO_CACHE, **BACKEND_RETRIES)
def release_held(state: State, run_dir: str) -> State:
    """After the question asked of a run held at half its length: its job trains on where
    the question was withdrawn (the flow watches it again), else it is stopped (a probe
    learned faster: the run goes on from it)."""
    job_name = state.history.latest_job_name
    if job_name is None:
        return state
    if state.next_action is not NextAction.monitor:
        return stop_job.fn(state, run_dir)
    return let_go_on(state, backend_for(state.run_spec.backend, run_dir), job_name)


def let_go_on(state: State, backend: JobBackend, job_name: str) -> State:
    """The current attempt's job, held where it was asked, trains on: to its next hold
    point (next_hold_point: held there again, Attempt.hold_at moved), or past half to its
    end (no longer held, Attempt.hold_at cleared)."""
    attempt = state.current_attempt
    held_at = attempt.hold_at if attempt is not None else None
    further = None
    if attempt is not None and held_at is not None:
        further = next_hold_point(state.run_spec, held_at, attempt.epoch_updates)
    backend.continue_job(job_name, until=further)
    task_logger().info(
        "job %s, held after %s updates and asked there, trains on %s",
        job_name,
        held_at,
        "to its end" if further is None else f"to update {further}, to be asked there",
    )
    return update_current_attempt(state, hold_at=further)


def stop_latest_job(flow: Any, flow_run: Any, state: Any) -> None:
    """on_cancellation hook of the remediate flow (Prefect calls it with these keyword
    names): a cancelled flow must not leave its detached job running. For deployment runs
    it runs in the runner."""
    run_dir = run_dir_of(flow_run.parameters or {}, flow_run.name)
    if not state_path(run_dir).exists():
        return
    payload = load_run(run_dir)
    backend = backend_for(payload.run_spec.backend, run_dir)
    if payload.history.latest_job_name:
        backend.stop(payload.history.latest_job_name)
    for probe in payload.history.attempts:  # probes held at their bound, waiting for a word
        if probe.held:
            backend.stop(probe.job_name)  # one ended already: nothing to do

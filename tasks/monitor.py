"""monitor: poll the job until something changes, then decide the next action.

One call is one monitor transition (num_monitor_transitions), as in the original; the
polling happens inside the task (a few seconds apart) so the flow keeps few task runs.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import cache
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run
from prefect.states import StateType

from remedy.decisions.observe import (
    decide,
    early_finding,
    held_to_be_asked,
    observe,
    progress_line,
    unmeasured_epoch,
    until_asked_s,
    with_job_hold,
    with_stated_length,
    young_look_s,
)
from remedy.jobs import backend_for
from remedy.outlets.publish import publish_progress
from remedy.records.logs import task_logger
from remedy.state_schema import JobStatus, NextAction, State
from remedy.state_schema.transitions import end, update_current_attempt
from remedy.strategies.outcomes import descent_figures, learning_rate_of
from remedy.tasks.plan import learned
from remedy.tasks.retry import BACKEND_RETRIES
from remedy.tasks.stop import let_go_on

CANCEL_CHECK_EVERY_S = 2.0
PROGRESS_EVERY_S = 5.0


def flow_run_cancelled() -> bool:
    """True when someone asked to cancel the flow run this task belongs to.

    A direct (non-deployment) run is not interrupted by Prefect on cancel; it must look.
    """
    if flow_run.id is None:
        return False
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run.id)
    return run.state is not None and run.state.type in (
        StateType.CANCELLING,
        StateType.CANCELLED,
    )


@task(cache_policy=NO_CACHE, **BACKEND_RETRIES)  # an outage of the backend is retried
def monitor(
    state: State, run_dir: str, poll_interval_s: float = 2.0, max_wait_s: float = 600.0
) -> State:
    logger = task_logger()
    job_name = state.history.latest_job_name
    if job_name is None:
        return end(state, "nothing to monitor: no job was launched")
    backend = backend_for(state.run_spec.backend, run_dir)
    before = (
        state.job_status.value if state.job_status else None,
        state.rule_status.value if state.rule_status else None,
    )
    started = time.monotonic()
    last_cancel_check = last_progress = 0.0
    looked: tuple[int, float] | None = None  # the last look's step and time
    while True:
        now = time.monotonic()
        if now - last_cancel_check >= CANCEL_CHECK_EVERY_S:
            last_cancel_check = now
            if flow_run_cancelled():
                logger.warning("flow run cancelled: stopping job %s", job_name)
                backend.stop(job_name)
                return end(state, f"cancelled: the flow run was cancelled, job {job_name} stopped")
        snapshot = with_stated_length(state, backend.describe(job_name))
        state = with_job_hold(state, snapshot)
        state, said = unmeasured_epoch(state, snapshot)
        if said is not None:
            logger.warning(said)
        seen = observe(snapshot)
        if now - last_progress >= PROGRESS_EVERY_S or seen.settled:
            last_progress = now
            line = progress_line(state, snapshot)
            logger.info(line)
            publish_progress(state, snapshot, line)
        # the job's step records at this look, read once (by the question and for the
        # figures kept on the attempt), and only where needed
        records_now = cache(lambda: backend.metrics(job_name))
        early = early_finding(state, snapshot, records_now, looked)
        if early is None and not seen.settled and held_to_be_asked(state, snapshot):
            state = let_go_on(state, backend, job_name)  # asked where it held: nothing found
        if early or seen.key != before or seen.settled or now - started >= max_wait_s:
            records = None
            if early or (seen.settled and snapshot.status is JobStatus.Completed):
                records = records_now()  # the figures its finding read, kept
                state = with_descent(state, records)
            location = backend.metrics_location(job_name)
            decided = decide(state, seen, snapshot, location, early)
            if decided.next_action is NextAction.end and seen.settled:
                # the last attempt's outcome, recorded
                decided = learned(decided, run_dir, records)
            return decided
        soonest = min(
            until_asked_s(snapshot, looked, now),
            young_look_s(state, snapshot, looked, datetime.now(UTC)),
        )
        time.sleep(min(poll_interval_s, soonest))
        looked = (snapshot.progress.step, now) if snapshot.progress else None


def with_descent(state: State, records: list[dict[str, Any]]) -> State:
    """The attempt's descent (loss_thirds, rate_thirds, gradient_agreement, loss_rises
    and update_ratio, from its step records so far), completed or asked while it runs: the
    verdict reads whether it was still speeding up at its end, whether its schedule was
    annealing the rate then, whether its gradients still agreed, whether its batches were
    noisy, and how far its updates moved its weights; the payload keeps the figures its
    finding read (the plan's digest sets update_ratio again, from before the finding)."""
    attempt = state.current_attempt
    typed = learning_rate_of(attempt.spec) if attempt is not None else None
    return update_current_attempt(state, **descent_figures(records, typed))

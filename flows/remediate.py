"""The remediation loop: train -> monitor -> (stop -> plan -> notify) -> ... -> end.

The flow is a pure function of the payload: any State starts or resumes it. The state is
persisted to the run directory after every transition. At its end the flow writes the run's
HTML report (RUN_DIR/report/index.html) and links it from the flow run's page.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.context import FlowRunContext
from prefect.states import Cancelled
from pydantic import BaseModel, Field
from remedy.jobs import backend_for
from remedy.state_schema import JobStatus, NextAction, RuleStatus, State
from remedy.tasks.messages import final_message, redact, retraining_message
from remedy.tasks.monitor import monitor
from remedy.tasks.notify import notify
from remedy.tasks.persist import load_run, persist, runs_root, state_path
from remedy.tasks.plan import plan
from remedy.tasks.publish import publish_attempts, publish_event, publish_report
from remedy.tasks.stop import stop_job
from remedy.tasks.train import ensure_launched, train

RUNNING = (JobStatus.InProgress, JobStatus.Stopping)


class RemediateSettings(BaseModel):
    poll_interval_s: float = Field(2.0, gt=0, description="Seconds between job status polls.")
    max_wait_s: float = Field(
        600.0, gt=0, description="Longest a monitor call waits for a change before reporting."
    )
    notify_config: str | None = Field(
        None, description="Path to an apprise config file (targets are secrets: not here)."
    )
    report: bool = Field(
        True,
        description="At the end, write RUN_DIR/report/index.html (plots of every attempt) "
        "and link it from the flow run.",
    )


def stop_latest_job(flow: Any, flow_run: Any, state: Any) -> None:
    """on_cancellation hook (Prefect calls it with these keyword names): a cancelled flow
    must not leave its detached job running. For deployment runs it runs in the runner."""
    run_dir = (flow_run.parameters or {}).get("run_dir") or default_run_dir(flow_run.name)
    if not state_path(run_dir).exists():
        return
    payload = load_run(run_dir)
    if payload.history.latest_job_name:
        backend_for(payload.run_spec.backend, run_dir).stop(payload.history.latest_job_name)


def write_report(run_dir: str) -> str | None:
    """The run's HTML report; a run never fails for want of its report."""
    from remedy.tasks.report import report  # matplotlib: imported only when a run ends

    outcome = report(run_dir, return_state=True)
    if outcome.is_completed():
        return outcome.result()
    get_run_logger().warning("no report: %s", redact(outcome.message or "it failed"))
    return None


def default_run_dir(flow_run_name: str) -> str:
    """<REMEDY_RUNS_DIR or ./runs>/<flow run name>, for runs started from the UI."""
    return str(runs_root() / flow_run_name)


@flow(name="remediate", on_cancellation=[stop_latest_job], log_prints=True)
def remediate(
    state: State = State(),  # noqa: B008 (pydantic defaults are copied, and the UI shows them)
    run_dir: str | None = None,
    settings: RemediateSettings | None = None,
) -> State | Any:
    settings = settings or RemediateSettings()
    run_dir = run_dir or default_run_dir(FlowRunContext.get().flow_run.name)
    logger = get_run_logger()
    persist(run_dir, state, "start")
    state = ensure_launched(state, run_dir)

    while state.next_action is not NextAction.end:
        if state.next_action is NextAction.launch_new:
            state = train(state, run_dir)
            persist(run_dir, state, "train")
            publish_attempts(state, run_dir)
            continue

        state = monitor(state, run_dir, settings.poll_interval_s, settings.max_wait_s)
        if state.rule_status is RuleStatus.IssuesFound:
            publish_event("issues_found", state, run_dir)
            state = stop_job(state, run_dir)
            state = plan(state, run_dir)
            if state.next_action is NextAction.launch_new:
                publish_event("retraining", state, run_dir)
                notify(*retraining_message(state), config_path=settings.notify_config)
        elif state.next_action is NextAction.end and state.job_status in RUNNING:
            state = stop_job(state, run_dir)  # a budget ended the flow with the job running
        persist(run_dir, state, "monitor")

    completed = state.job_status is JobStatus.Completed and state.rule_status is not (
        RuleStatus.IssuesFound
    )
    publish_event("completed" if completed else "gave_up", state, run_dir)
    report_dir = write_report(run_dir) if settings.report else None
    publish_attempts(state, run_dir, report_dir)
    if report_dir is not None:
        publish_report(report_dir, run_dir)
    notify(*final_message(state), config_path=settings.notify_config)
    logger.info("done: %s", state.end_reason)
    if (state.end_reason or "").startswith("cancelled"):
        return Cancelled(message=state.end_reason, data=state)
    return state

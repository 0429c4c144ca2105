"""The remediation loop: train -> monitor -> (stop -> plan -> notify) -> ... -> end.

The run form (the deployment's parameters) holds only what a person chooses: run_spec,
budgets, policy and its config, and settings (polling, notifications, report). The flow's
own state (history, next_action, statuses, findings) lives in the run directory. A whole
payload, the seed format included, still starts or resumes a run through the API and the
CLI: the `state` parameter, left out of the form's schema.

The flow is a pure function of the payload: any State starts or resumes it. The state is
persisted to the run directory after every transition; one process at a time drives a run
directory, and calling the flow again on it (a retry, a resume) goes on from its saved
state. At its end the flow writes the run's
HTML report (RUN_DIR/report/index.html) and links it from the flow run's page. A run
that did not end clean (records/verdict.py) ends Failed, a cancelled one Cancelled, each
with the end reason as its message and the final payload as its data.
"""

from __future__ import annotations

from typing import Annotated, Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from remedy.flows.run_form import MODEL_FORM, BudgetsForm, RunSpecForm
from remedy.state_schema import (
    DEFAULT_POLICY,
    Budgets,
    JobStatus,
    NextAction,
    PolicyStep,
    RuleStatus,
    RunSpec,
    State,
)
from remedy.state_schema.transitions import retraining_budget_spent
from remedy.tasks.monitor import monitor
from remedy.tasks.notify import announce, announce_end
from remedy.tasks.plan import PolicyName, plan
from remedy.tasks.probe import try_probes
from remedy.tasks.record import (
    final_state,
    finish,
    hide_parameters,
    open_run,
    quiet_task_runs,
    record,
    release_run,
)
from remedy.tasks.stop import is_held, release_held, stop_job, stop_latest_job
from remedy.tasks.train import check_spec, ensure_launched, train

RUNNING = (JobStatus.InProgress, JobStatus.Stopping)


class RemediateSettings(BaseModel):
    poll_interval_s: float = Field(2.0, gt=0, description="Seconds between job status polls.")
    max_wait_s: float = Field(
        600.0,
        gt=0,
        title="Monitor Max Wait (s)",  # apart from the spot jobs' max_wait_s in the same form
        description="Longest a monitor call waits for a change before reporting.",
    )
    notify_config: str | None = Field(
        None,
        description="Path to an apprise config file on the machine that runs the flow "
        "(targets are secrets: never here).",
    )
    notify_block: str | None = Field(
        None,
        description="Name of a Prefect Secret block holding the apprise URLs to notify "
        "(space or comma separated); with REMEDY_NOTIFY_URLS and notify_config.",
    )
    report: bool = Field(
        True,
        description="At the end, write RUN_DIR/report/index.html (plots of every attempt) "
        "and link it from the flow run.",
    )
    notify: bool = Field(
        True,
        description="Send messages to the notification targets (retraining, the end); the "
        "events for automations are emitted either way. A search turns it off for its "
        "candidates unless its settings.notify_candidates.",
    )


@flow(
    name="remediate",
    on_cancellation=[stop_latest_job, release_run],
    on_failure=[release_run],
    on_crashed=[release_run],
    log_prints=True,
)
def remediate(
    # What a person chooses: the run form. Pydantic defaults are copied; the UI shows them.
    run_spec: RunSpecForm = RunSpec(),  # noqa: B008
    budgets: BudgetsForm = Budgets(),  # noqa: B008
    policy: PolicyName = DEFAULT_POLICY,
    policy_config: dict[str, list[PolicyStep]] | None = None,
    settings: Annotated[RemediateSettings, MODEL_FORM] = RemediateSettings(),  # noqa: B008
    run_dir: str = "",
    # A whole payload (the seed format, a saved state.json) for the API and the CLI; when
    # given it is the run's state and the four above are not used. Not in the form.
    state: SkipJsonSchema[State | None] = None,
) -> State | Any:
    """Remediate a training job until it trains cleanly or the budget is spent.

    Args:
        run_spec: The job to train: its hyperparameters, backend and debugger rules.
        budgets: Launches and monitor transitions the run may use.
        policy: Remediation policy: which strategy follows which finding.
        policy_config: Finding -> ordered strategies with limits (policy 'config', and
            'adaptive' for the findings it names).
        settings: Polling, notifications and the report.
        run_dir: Where the run keeps its state and jobs, on the machine that runs the flow
            (empty: RUNS/BASE_JOB_NAME-FLOW_RUN_NAME, RUNS being $REMEDY_RUNS_DIR or ./runs).
    """
    settings = settings or RemediateSettings()
    hide_parameters()  # the UI shows parameters: no role ARN or bucket there
    quiet_task_runs()  # no "Finished in state Completed()" line per task run
    if state is None:
        state = State(
            run_spec=run_spec, budgets=budgets, policy=policy, policy_config=policy_config
        )
    # Empty (the form's untouched field) is the default folder: a plain text field in the
    # form, where a nullable one would open on Prefect's type toggle.
    given_dir = run_dir or None
    check_spec(state, given_dir, flow_run.name)  # a spec no job can start from: nothing created
    run_dir, state = open_run(state, given_dir, flow_run.name)  # a retry resumes, never redoes
    state = ensure_launched(state, run_dir)

    while state.next_action is not NextAction.end:
        if state.next_action is NextAction.launch_new:
            state = train(state, run_dir)
            record(state, run_dir, "train")
            continue

        state = monitor(state, run_dir, settings.poll_interval_s, settings.max_wait_s)
        if state.rule_status is RuleStatus.IssuesFound:
            announce(state, run_dir, "issues_found")
            held = is_held(state)  # asked at half its length: it waits for the answer
            if not held:
                state = stop_job(state, run_dir)
            state = plan(state, run_dir)
            if state.probes:  # candidate fixes, tried briefly side by side: the best is kept
                state = try_probes(state, run_dir, settings.poll_interval_s)
            if held:  # it trains on where no probe learned faster, else it is stopped
                state = release_held(state, run_dir)
            if state.next_action is NextAction.launch_new and not retraining_budget_spent(state):
                announce(  # with the budget spent, train ends the run: nothing is retrained
                    state,
                    run_dir,
                    "retraining",
                    settings.notify_config,
                    settings.notify_block,
                    settings.notify,
                )
        elif state.next_action is NextAction.end and state.job_status in RUNNING:
            state = stop_job(state, run_dir)  # a budget ended the flow with the job running
        record(state, run_dir, "monitor")

    report_dir = None
    if settings.report:
        from remedy.tasks.report import report  # matplotlib: imported only when a run ends

        report_dir = report(run_dir)
    announce_end(
        state,
        run_dir,
        report_dir,
        settings.notify_config,
        settings.notify_block,
        settings.notify,
    )
    finish(state, run_dir)
    get_run_logger().info("done: %s", state.end_reason)
    return final_state(state)

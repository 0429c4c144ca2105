"""monitor: poll the job until something changes, then decide the next action.

One call is one monitor transition (num_monitor_transitions), as in the original; the
polling happens inside the task (a few seconds apart) so the flow keeps few task runs.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.context import TaskRunContext
from prefect.states import StateType
from remedy.jobs import JobDescription, backend_for, is_infrastructure_failure
from remedy.state_schema import (
    DataProblem,
    Finding,
    JobStatus,
    NextAction,
    PlannedChange,
    RuleStatus,
    State,
)
from remedy.state_schema.transitions import end, update_current_attempt
from remedy.records.logs import task_logger
from remedy.records.publish import publish_progress

FINAL_RULE_STATUSES = {"IssuesFound", "NoIssuesFound", "Error", "Stopped"}
CANCEL_CHECK_EVERY_S = 2.0
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class Observation:
    job_status: JobStatus
    rule_status: RuleStatus
    rules_final: bool
    findings: list[Finding]
    failure_reason: str | None

    @property
    def key(self) -> tuple[str, str]:
        return self.job_status.value, self.rule_status.value


def guard_fields(rule: dict[str, Any]) -> dict[str, Any]:
    """What the NaN guard adds to a rule status (training/guard.py): bundle and bad records."""
    fields = {
        "bundle": rule.get("bundle"),
        "localisation": rule.get("localisation"),
        "suspect_samples": rule.get("suspect_samples") or [],
        "suspect_shards": rule.get("suspect_shards") or [],
    }
    if rule.get("data_problem"):
        fields["data_problem"] = DataProblem(**rule["data_problem"])
    return fields


def trace_data_problems(findings: list[Finding], state: State) -> list[Finding]:
    """Suspect samples that failed in an earlier attempt too are bad records: a data problem."""
    earlier: Counter[int] = Counter()
    for attempt in state.history.attempts:
        if attempt.job_name != state.history.latest_job_name:
            earlier.update({i for f in attempt.findings for i in f.suspect_samples})
    traced = []
    for finding in findings:
        repeated = [i for i in finding.suspect_samples if earlier[i]]
        if repeated and finding.data_problem is None:
            shard = dict(zip(finding.suspect_samples, finding.suspect_shards, strict=False))
            problem = DataProblem(
                samples=repeated,
                shards=[shard.get(i, "?") for i in repeated],
                failures=1 + max(earlier[i] for i in repeated),
            )
            finding = finding.model_copy(update={"data_problem": problem})
        traced.append(finding)
    return traced


def observe(description: JobDescription) -> Observation:
    rules = description.get("DebugRuleEvaluationStatuses", [])
    words = [rule.get("RuleEvaluationStatus", "Unknown") for rule in rules]
    findings = [
        Finding(
            rule=rule.get("RuleConfigurationName", "?"),
            status=RuleStatus.IssuesFound,
            step=rule.get("step"),
            tensor=rule.get("tensor"),
            message=rule.get("StatusDetails", ""),
            **guard_fields(rule),
        )
        for rule in rules
        if rule.get("RuleEvaluationStatus") == "IssuesFound"
    ]
    if findings:
        summary = RuleStatus.IssuesFound
    elif not words:
        summary = RuleStatus.NotFound
    elif "Error" in words:
        summary = RuleStatus.Error
    elif all(word == "NoIssuesFound" for word in words):
        summary = RuleStatus.NoIssuesFound
    elif all(word in RuleStatus.__members__ for word in words):
        summary = RuleStatus.InProgress
    else:
        summary = RuleStatus.Unknown
    return Observation(
        job_status=JobStatus(description["TrainingJobStatus"]),
        rule_status=summary,
        rules_final=all(word in FINAL_RULE_STATUSES for word in words),
        findings=findings,
        failure_reason=description.get("FailureReason"),
    )


def record_duration_and_curve(state: State) -> State:
    """Duration of the ended attempt, and where its loss curve lives (local backend)."""
    attempt = state.current_attempt
    if attempt is None:
        return state
    fields: dict[str, object] = {}
    if attempt.started_at and attempt.ended_at:
        fields["duration_s"] = (attempt.ended_at - attempt.started_at).total_seconds()
    if state.run_spec.backend == "local":
        fields["curve"] = f"jobs/{attempt.job_name}/metrics.jsonl"
    return update_current_attempt(state, **fields)


def settled(observation: Observation) -> bool:
    """Nothing more will change for this job without the flow acting."""
    if observation.rule_status is RuleStatus.IssuesFound:
        return True
    final = observation.job_status in (JobStatus.Completed, JobStatus.Failed, JobStatus.Stopped)
    return final and observation.rules_final


def decide(state: State, seen: Observation, description: JobDescription) -> State:
    """The original monitor's choice, on a fresh observation of the current job."""
    seen = replace(seen, findings=trace_data_problems(seen.findings, state))
    history = state.history.model_copy(
        update={"num_monitor_transitions": state.history.num_monitor_transitions + 1}
    )
    state = state.model_copy(
        update={
            "history": history,
            "job_status": seen.job_status,
            "rule_status": seen.rule_status,
            "findings": seen.findings,
        }
    )
    progress = description.get("Progress", {})
    metrics = {m["MetricName"]: m["Value"] for m in description.get("FinalMetricDataList", [])}
    start_step = int(progress.get("start_step", 0))  # > 0 for a warm-started job
    state = update_current_attempt(
        state,
        steps_run=max(int(progress.get("step", start_step)) - start_step, 0),
        start_step=start_step,
        final_loss=metrics.get("test:loss", progress.get("loss")),
        final_accuracy=metrics.get("test:accuracy"),
        findings=seen.findings,
    )
    if settled(seen):
        state = update_current_attempt(
            state,
            outcome=seen.job_status,
            failure_reason=seen.failure_reason,
            ended_at=description.get("TrainingEndTime"),
        )
        state = record_duration_and_curve(state)

    budget = state.budgets.max_monitor_transitions
    if history.num_monitor_transitions > budget:
        return end(state, f"max_monitor_transitions ({budget}) exceeded")
    if seen.rule_status is RuleStatus.IssuesFound:
        return state.model_copy(update={"next_action": NextAction.launch_new})  # after plan
    if not settled(seen):
        return state.model_copy(update={"next_action": NextAction.monitor})
    if seen.job_status is JobStatus.Completed:
        return end(state, "completed: the job finished and no rule found an issue")
    if seen.job_status is JobStatus.Failed and is_infrastructure_failure(seen.failure_reason):
        relaunch = PlannedChange(
            strategy="relaunch_unchanged",
            reason=f"infrastructure failure: {seen.failure_reason}",
        )
        return state.model_copy(
            update={"next_action": NextAction.launch_new, "planned_change": relaunch}
        )
    if seen.job_status is JobStatus.Failed:
        return end(state, f"job failed: {seen.failure_reason}")
    return end(state, "the job was stopped outside the flow")


def flow_run_cancelled() -> bool:
    """True when someone asked to cancel the flow run this task belongs to.

    A direct (non-deployment) run is not interrupted by Prefect on cancel; it must look.
    """
    context = TaskRunContext.get()
    if context is None or context.task_run.flow_run_id is None:
        return False
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(context.task_run.flow_run_id)
    return flow_run.state is not None and flow_run.state.type in (
        StateType.CANCELLING,
        StateType.CANCELLED,
    )


def progress_line(state: State, description: JobDescription) -> str:
    rules = ", ".join(
        f"{r.get('RuleConfigurationName')}: {r.get('RuleEvaluationStatus')}"
        for r in description.get("DebugRuleEvaluationStatuses", [])
    )
    progress = description.get("Progress")
    if progress:
        loss = progress.get("loss")
        where = (
            f"step {progress.get('step')}/{progress.get('total_steps', '?')} "
            f"epoch {progress.get('epoch')} loss {'non-finite' if loss is None else f'{loss:.4g}'}"
        )
    else:
        where = "starting"
    return (
        f"attempt {state.history.num_retraining} | {description['TrainingJobStatus']} | "
        f"{where} | {rules or 'rules: starting'}"
    )


@task(cache_policy=NO_CACHE)
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
    while True:
        now = time.monotonic()
        if now - last_cancel_check >= CANCEL_CHECK_EVERY_S:
            last_cancel_check = now
            if flow_run_cancelled():
                logger.warning("flow run cancelled: stopping job %s", job_name)
                backend.stop(job_name)
                return end(state, f"cancelled: the flow run was cancelled, job {job_name} stopped")
        description = backend.describe(job_name)
        seen = observe(description)
        if now - last_progress >= PROGRESS_EVERY_S or settled(seen):
            last_progress = now
            line = progress_line(state, description)
            logger.info(line)
            publish_progress(state, description, line)
        if seen.key != before or settled(seen) or now - started >= max_wait_s:
            return decide(state, seen, description)
        time.sleep(poll_interval_s)

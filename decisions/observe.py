"""What a job snapshot means for the run: the monitor's reading of it and its choice of the
next action (the original workflow's Choice state after each monitor step)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from remedy.jobs import JobSnapshot, Progress, RuleEvaluation, RuleWord, is_infrastructure_failure
from remedy.records.asked_early import ASKED_ONLY_AT_END, asked_early
from remedy.records.verdict import run_flaw, run_verdict_finding
from remedy.state_schema import (
    Attempt,
    DataProblem,
    Finding,
    JobStatus,
    NextAction,
    PlannedChange,
    RuleStatus,
    State,
)
from remedy.state_schema.asking_points import ASKED_AT, asking_point
from remedy.state_schema.loss_windows import windowed_losses
from remedy.state_schema.transitions import CLEAN_END, end, update_current_attempt
from remedy.strategies.outcomes import descent_figures, learning_rate_of


@dataclass(frozen=True)
class Observation:
    job_status: JobStatus
    rule_status: RuleStatus
    rules_final: bool
    findings: list[Finding]
    failure_reason: str | None
    rule_errors: list[Finding] = field(default_factory=list)  # rules that could not judge

    @property
    def key(self) -> tuple[str, str]:
        return self.job_status.value, self.rule_status.value

    @property
    def settled(self) -> bool:
        """Nothing more will change for this job without the flow acting."""
        if self.rule_status is RuleStatus.IssuesFound:
            return True
        final = self.job_status in (JobStatus.Completed, JobStatus.Failed, JobStatus.Stopped)
        return final and self.rules_final


def as_finding(rule: RuleEvaluation, status: RuleStatus) -> Finding:
    """The payload's Finding of a rule that found an issue or failed: which rule, where and
    what it said; an issue also carries what the job kept of it (tensor, bundle, samples)."""
    kept: dict[str, Any] = {}
    if status is RuleStatus.IssuesFound:
        kept = {
            "tensor": rule.tensor,
            "bundle": rule.bundle,
            "localisation": rule.localisation,
            "suspect_samples": rule.suspect_samples,
            "suspect_shards": rule.suspect_shards,
            "data_problem": DataProblem(**rule.data_problem) if rule.data_problem else None,
        }
    return Finding(
        rule=rule.name,
        rule_class=rule.rule,
        status=status,
        step=rule.step,
        message=rule.details,
        **kept,
    )


def ended_rule(rule: RuleEvaluation, job_status: JobStatus) -> RuleEvaluation:
    """A rule stopped although its job completed (it judged no step, or not the last ones)
    can never judge now: Error. (A pending one may still judge: the cloud service's rules
    go on after the job; the local backend ends its pending ones itself.)"""
    if rule.status is RuleWord.STOPPED and job_status is JobStatus.Completed:
        return rule.as_error(
            f"the job ended before this rule judged its steps ({rule.details or 'none'})"
        )
    return rule


def observe(snapshot: JobSnapshot) -> Observation:
    rules = snapshot.rules
    if snapshot.is_final:  # no rule reads as InProgress once its job has ended
        rules = [ended_rule(rule, snapshot.status) for rule in rules]
    # The rules' own words (the job boundary read them: an unknown one is an Error) become
    # the payload's one summary here, and nowhere else.
    words = {rule.status for rule in rules}
    findings = [
        as_finding(r, RuleStatus.IssuesFound) for r in rules if r.status is RuleWord.ISSUES_FOUND
    ]
    errors = [as_finding(r, RuleStatus.Error) for r in rules if r.status is RuleWord.ERROR]
    if findings:
        summary = RuleStatus.IssuesFound
    elif not words:
        summary = RuleStatus.NotFound
    elif RuleWord.ERROR in words:
        summary = RuleStatus.Error
    elif words == {RuleWord.NO_ISSUES_FOUND}:
        summary = RuleStatus.NoIssuesFound
    elif snapshot.is_final and RuleWord.STOPPED in words:
        summary = RuleStatus.Stopped  # the job was stopped, its rules with it
    else:
        summary = RuleStatus.InProgress
    return Observation(
        job_status=snapshot.status,
        rule_status=summary,
        rules_final=all(rule.is_final for rule in rules),
        findings=findings,
        failure_reason=snapshot.failure_reason,
        rule_errors=errors,
    )


def trace_data_problems(findings: list[Finding], state: State) -> list[Finding]:
    """Suspect samples that failed in an earlier attempt too are bad records: a data problem."""
    earlier: Counter[int] = Counter()
    for attempt in state.history.attempts:
        if attempt.job_name != state.history.latest_job_name:
            earlier.update({i for f in attempt.findings for i in f.suspect_samples})
    traced = []
    for found in findings:
        repeated = [i for i in found.suspect_samples if earlier[i]]
        if repeated and found.data_problem is None:
            shard = dict(zip(found.suspect_samples, found.suspect_shards, strict=False))
            problem = DataProblem(
                samples=repeated,
                shards=[shard.get(i, "?") for i in repeated],
                failures=1 + max(earlier[i] for i in repeated),
            )
            found = found.model_copy(update={"data_problem": problem})
        traced.append(found)
    return traced


def record_progress(state: State, snapshot: JobSnapshot) -> State:
    """Steps run and latest figures of the current attempt, from a snapshot of its job."""
    progress = snapshot.progress
    start_step = progress.start_step if progress else 0  # > 0 for a warm-started job
    loss = snapshot.final_metrics.get("test:loss", progress.loss if progress else None)
    fields: dict[str, object] = {
        "steps_run": progress.steps_run if progress else 0,
        "start_step": start_step,
        "final_loss": loss,
        "final_accuracy": snapshot.final_metrics.get("test:accuracy"),
        "metrics": snapshot.final_metrics,
    }
    if progress and progress.first_loss is not None:
        fields["initial_loss"] = progress.first_loss
    if snapshot.backend_job_id is not None:  # a scheduler's job (Slurm): its id and queue wait
        fields["backend_job_id"] = snapshot.backend_job_id
        fields["queue_wait_s"] = snapshot.queue_wait_s
        fields["requeues"] = snapshot.requeues
    windows = progress and windowed_losses(
        progress.steps_run, progress.first_losses, progress.last_losses
    )
    if windows:
        initial, final, size = windows
        fields |= {"initial_window_loss": initial, "final_window_loss": final, "loss_window": size}
    return update_current_attempt(state, **fields)


def record_end(state: State, snapshot: JobSnapshot, metrics_location: str) -> State:
    """How the current attempt's job ended, its duration and where its metrics live."""
    state = update_current_attempt(
        state,
        outcome=snapshot.status,
        failure_reason=snapshot.failure_reason,
        ended_at=snapshot.ended,
        curve=metrics_location,
    )
    attempt = state.current_attempt
    if attempt is not None and attempt.started_at and attempt.ended_at:
        duration = (attempt.ended_at - attempt.started_at).total_seconds()
        state = update_current_attempt(state, duration_s=duration)
    return state


def with_stated_length(state: State, snapshot: JobSnapshot) -> JobSnapshot:
    """The snapshot with the job's length (total_steps) where the job reports none and its
    spec states it: a script's max_steps role, or its num_epochs role times the updates of
    an epoch, as its spec states them (updates_per_epoch) or else as the job measured them
    (training/epoch_length.py). Shown as step 120/400 and as the UI's percentage, and the
    verdict asks at half of it (early_finding)."""
    progress, attempt = snapshot.progress, state.current_attempt
    if progress is None or progress.total_steps or attempt is None:
        return snapshot
    stated = attempt.spec.known_length(progress.steps_per_epoch)
    if stated is None:
        return snapshot
    known = progress.model_copy(update={"total_steps": stated})
    return snapshot.model_copy(update={"progress": known})


def early_finding(
    state: State,
    snapshot: JobSnapshot,
    records: Callable[[], Sequence[Mapping[str, Any]]],
    before: tuple[int, float] | None = None,
) -> Finding | None:
    """The verdict's questions asked of a running job at an eighth, a quarter and half its
    length, where known (records/asked_early.py): a finding when its model has not begun to
    learn.
    `records`: the job's step records so far, read only when its loss has not moved.
    `before`: the monitor's previous look (its step and time; None: none). A job held at
    half its length (held_to_be_asked) is asked there whether its rate holds it back, too."""
    if snapshot.is_final or snapshot.progress is None:
        return None

    def with_descent(attempt: Attempt) -> Attempt:
        return attempt.model_copy(update=descent_figures(records(), learning_rate_of(attempt.spec)))

    seen_before = before[0] if before else None
    progress = record_progress(state, snapshot)
    held = held_to_be_asked(state, snapshot)
    return asked_early(progress, snapshot.progress.total_steps, with_descent, seen_before, held)


def with_job_hold(state: State, snapshot: JobSnapshot) -> State:
    """The hold point a job said once it measured its epoch (Progress.hold_at), recorded
    on an attempt launched to hold by its epochs (Attempt.holds_by_its_epochs), with that
    epoch (Attempt.epoch_updates: its length, for the next point): from then on it is held
    as one whose hold points were known at its launch."""
    attempt, progress = state.current_attempt, snapshot.progress
    said = progress.hold_at if progress is not None else None
    if attempt is None or not attempt.holds_by_its_epochs or said is None:
        return state
    epoch = progress.steps_per_epoch if progress is not None else None
    return update_current_attempt(
        state, hold_at=said, holds_by_its_epochs=False, epoch_updates=epoch
    )


def unmeasured_epoch(state: State, snapshot: JobSnapshot) -> tuple[State, str | None]:
    """An attempt launched to hold by its epochs whose job said it cannot measure one
    (Progress.epoch_unmeasured: it batches its data by hand), or that ran to its end with
    none measured (no DataLoader pass ended): no longer waiting for a hold, and, on the
    run's first attempt, what to state so that it is asked at an eighth, a quarter and
    half (later attempts of the same script would only say it again)."""
    attempt, progress = state.current_attempt, snapshot.progress
    if attempt is None or not attempt.holds_by_its_epochs or progress is None:
        return state, None
    if progress.epoch_unmeasured:
        why = "batches its data without a torch DataLoader, so the launcher cannot measure an epoch"
    elif snapshot.status is JobStatus.Completed and progress.steps_per_epoch is None:
        # It ran to its own end and no DataLoader pass ended: it leaves its loop at a
        # limit of its own (a step count), or one epoch is longer than the whole run.
        why = "ended no pass over its DataLoader (it left the loop at a limit of its own?)"
    else:
        return state, None
    state = update_current_attempt(state, holds_by_its_epochs=False)
    if state.history.num_retraining != 1:
        return state, None
    flag = state.run_spec.hyperparameter_roles.get("num_epochs", "num_epochs")
    return state, (
        f"its length stays unknown: its epochs flag ({flag}) is mapped, but the job {why}, "
        f'and {ASKED_ONLY_AT_END}; state its epoch: "updates_per_epoch": <updates> in the '
        'run_spec, or map the flag of its updates: "hyperparameter_roles": {"max_steps": '
        '"<flag>"} (docs/job-contract.md, "Roles")'
    )


def held_to_be_asked(state: State, snapshot: JobSnapshot) -> bool:
    """The current attempt's job holds at its hold point (Attempt.hold_at: an eighth, a
    quarter or half its length): it has run that many updates and waits for the flow's
    word."""
    attempt, progress = state.current_attempt, snapshot.progress
    if attempt is None or attempt.hold_at is None or progress is None or snapshot.is_final:
        return False
    return progress.steps_run == attempt.hold_at  # past it: let go on already


# The soonest the monitor looks again when a job nears a point where it is asked.
SOONEST_LOOK_S = 0.1


def until_asked_s(snapshot: JobSnapshot, before: tuple[int, float] | None, now: float) -> float:
    """Seconds until the running job reaches the next share of its known length at which
    it is asked (ASKED_AT: an eighth, a quarter, half), at the pace its steps took since
    the monitor's last look (`before`: that look's step and time), so the verdict's
    question is asked there, not up to a poll later (2 s: 100 updates of a tiny job); inf
    where its length, its pace, or a point still to come is not known, and for a warm
    start (not asked)."""
    progress = snapshot.progress
    if snapshot.is_final or progress is None or not progress.total_steps or before is None:
        return math.inf
    if progress.start_step:
        return math.inf
    points = [asking_point(progress.total_steps, share) for share in ASKED_AT]
    coming = [point for point in points if point > progress.step]
    step, then = before
    pace = (progress.step - step) / (now - then) if now > then else 0.0
    if not coming or pace <= 0:
        return math.inf
    return max((coming[0] - progress.step) / pace, SOONEST_LOOK_S)


# A job's pace is learned by looks this often, in its first YOUNG_S seconds of running: a
# tiny job (a few seconds in all) can pass a quarter of its length between two of the
# usual looks, and until_asked_s needs two looks to know its pace. Once its progress shows,
# the next look comes at SOONEST_LOOK_S (the VAE example makes up to 800 updates a second:
# a quarter of its 1,032 is a third of a second).
YOUNG_S = 60.0
YOUNG_LOOK_S = 0.5


def young_look_s(
    state: State, snapshot: JobSnapshot, before: tuple[int, float] | None, now: datetime
) -> float:
    """While the current attempt is a cold start (it may be asked at an eighth of its
    length) whose job has run under YOUNG_S and whose pace is not known yet (no earlier
    look saw its progress: `before`): SOONEST_LOOK_S once this look saw its progress,
    YOUNG_LOOK_S before; inf otherwise (a job still queued, too)."""
    attempt = state.current_attempt
    if attempt is None or attempt.start_step != 0 or before is not None:
        return math.inf
    if snapshot.is_final or snapshot.started is None:
        return math.inf
    if (now - snapshot.started).total_seconds() >= YOUNG_S:
        return math.inf
    return YOUNG_LOOK_S if snapshot.progress is None else SOONEST_LOOK_S


def decide(
    state: State,
    seen: Observation,
    snapshot: JobSnapshot,
    metrics_location: str,
    early: Finding | None = None,
) -> State:
    """The original monitor's choice, on a fresh observation of the current job (`early`:
    the verdict's finding on it while it runs, early_finding)."""
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
    state = update_current_attempt(
        record_progress(state, snapshot), findings=seen.findings, rule_errors=seen.rule_errors
    )
    if seen.settled:
        state = record_end(state, snapshot, metrics_location)

    budget = state.budgets.max_monitor_transitions
    if history.num_monitor_transitions > budget:
        return end(state, f"max_monitor_transitions ({budget}) exceeded")
    if (why := unjudgeable(state, snapshot)) is not None:
        # The flow stops the job and acts on no finding: the loss rules' would be false
        # alarms (the attempt keeps what they said).
        return end(
            state.model_copy(update={"rule_status": RuleStatus.Stopped, "findings": []}), why
        )
    if seen.rule_status is RuleStatus.IssuesFound:
        return state.model_copy(update={"next_action": NextAction.launch_new})  # after plan
    if early is not None and not seen.settled:
        return verdict_found(state, early)  # the flow stops the job, as for a rule's finding
    if not seen.settled:
        return state.model_copy(update={"next_action": NextAction.monitor})
    if seen.job_status is JobStatus.Completed:
        if (found := run_verdict_finding(state)) is not None:
            return verdict_found(state, found)  # repaired as a rule's finding would be
        if (flaw := run_flaw(state)) is not None:
            return end(state, f"completed, but the run is not clean: {flaw}")
        attempt = state.current_attempt
        criteria = attempt.spec.success_criteria if attempt else []
        met = f", and it met {', '.join(map(str, criteria))}" if criteria else ""
        return end(state, f"{CLEAN_END}{met}")
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
    why = f": {seen.failure_reason}" if seen.failure_reason else ""  # e.g. a scancel by hand
    return end(state, f"the job was stopped outside the flow{why}")


def unjudgeable(state: State, snapshot: JobSnapshot) -> str | None:
    """Why the job cannot be judged as the run asks, for a job that steps several
    optimizers over parameters of their own (a GAN: its discriminator's loss, then its
    generator's, each rising as the other network improves): it states no
    success_criteria (the verdict "the model trained" reads the loss), or rules that read
    the loss judge it (their findings would be false alarms, repaired to no end); None
    otherwise. Ended at the first look that sees it, naming what to state, rather than
    judged on the loss."""
    attempt, progress = state.current_attempt, snapshot.progress
    if attempt is None or progress is None or (progress.optimizers or 1) < 2:
        return None
    job = (
        f"not judged: job {attempt.job_name} steps {progress.optimizers} optimizers over "
        "parameters of their own (a GAN or another model trained in parts): the losses it "
        "backpropagates are no one objective to minimise, so "
    )
    where = " (docs/job-contract.md, 'Several optimizers')"
    if not attempt.spec.success_criteria:
        return (
            f"{job}the loss rules and the verdict 'the model trained' cannot judge it. "
            "State success_criteria on a metric of the job and rules that read gradients "
            f"only{where}"
        )
    loss_rules = sorted({rule.name for rule in snapshot.rules if rule.reads_the_loss})
    if not loss_rules:
        return None
    return (
        f"{job}the rules that read the loss cannot judge it: {', '.join(loss_rules)}. "
        f"State rules that read gradients only, beside its success_criteria{where}"
    )


def verdict_found(state: State, found: Finding) -> State:
    """A run that no rule faulted, found wanting by the verdict (records/verdict.py: its
    model learned nothing, or too slowly; at its end, or at half its length): its finding,
    so the policy repairs it."""
    state = update_current_attempt(state, findings=[found])
    return state.model_copy(
        update={
            "rule_status": RuleStatus.IssuesFound,
            "findings": [found],
            "next_action": NextAction.launch_new,
        }
    )


def progress_line(state: State, snapshot: JobSnapshot, now: datetime | None = None) -> str:
    """`attempt 1 | InProgress | step 120/500, epoch 2, 3.1 steps/s, 38 s, loss 0.53 | ...`:
    what the job knows, and nothing it does not (no total, no epoch: not shown)."""
    rules = ", ".join(f"{r.name}: {r.status}" for r in snapshot.rules)
    progress = snapshot.progress
    if progress:
        where = progress_text(progress, snapshot.started, now or datetime.now(UTC))
    else:
        where = snapshot.status_message or "starting"  # e.g. waiting for a free GPU
    return (
        f"attempt {state.history.num_retraining} | {snapshot.status.value} | "
        f"{where} | {rules or 'rules: starting'}"
    )


def progress_text(progress: Progress, started: datetime | None, now: datetime) -> str:
    parts = [f"step {progress.step}" + (f"/{progress.total_steps}" if progress.total_steps else "")]
    if progress.epoch is not None:
        parts.append(f"epoch {progress.epoch}")
    if started is not None:
        elapsed = max((now - started).total_seconds(), 0.0)
        if elapsed > 0 and progress.steps_run:  # since the launch: start-up included
            parts.append(f"{progress.steps_run / elapsed:.3g} steps/s")
        parts.append(f"{elapsed:.0f} s")
    parts.append("loss non-finite" if progress.loss is None else f"loss {progress.loss:.4g}")
    return ", ".join(parts)

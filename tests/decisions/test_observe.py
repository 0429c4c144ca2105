"""The monitor's reading of a job snapshot and its choice of the next action."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from remedy.decisions.observe import (
    decide,
    early_finding,
    observe,
    progress_line,
    unmeasured_epoch,
    with_job_hold,
    with_stated_length,
)
from remedy.jobs import JobSnapshot
from remedy.state_schema import (
    LEARNING_TOO_SLOWLY,
    NOT_TRAINED,
    JobStatus,
    NextAction,
    RuleStatus,
    RunSpec,
    State,
)
from remedy.state_schema.transitions import begin_attempt, update_current_attempt


def describe(job: str, *rules: tuple[str, str], **extra: Any) -> JobSnapshot:
    statuses = [
        {
            "RuleConfigurationName": name,
            "RuleEvaluationStatus": word,
            "step": 30,
            "tensor": "gradient/head.weight",
            "StatusDetails": f"{name} says {word}",
        }
        for name, word in rules
    ]
    return JobSnapshot(name="j", status=job, rules=statuses, **extra)


def decided(state: State, snapshot: JobSnapshot) -> State:
    return decide(state, observe(snapshot), snapshot, "jobs/j/metrics.jsonl")


def running_state() -> State:
    return begin_attempt(State(), "j")


def test_summaries_of_rule_statuses() -> None:
    assert observe(describe("InProgress")).rule_status is RuleStatus.NotFound
    assert observe(describe("InProgress", ("A", "InProgress"))).rule_status is (
        RuleStatus.InProgress
    )
    both = observe(describe("InProgress", ("A", "IssuesFound"), ("B", "Error")))
    assert both.rule_status is RuleStatus.IssuesFound
    assert [f.rule for f in both.findings] == ["A"] and both.findings[0].step == 30
    odd = observe(describe("Completed", ("A", "Weird")))  # an unknown word: an error, named
    assert odd.rule_status is RuleStatus.Error and "unknown rule status word 'Weird'" in (
        odd.rule_errors[0].message
    )


def test_an_issue_keeps_where_it_was_found_and_an_error_only_what_the_rule_said() -> None:
    seen = observe(describe("InProgress", ("A", "IssuesFound"), ("B", "Error")))
    (issue,), (error,) = seen.findings, seen.rule_errors
    assert (issue.rule, issue.status, issue.step) == ("A", RuleStatus.IssuesFound, 30)
    assert issue.tensor == "gradient/head.weight" and issue.message == "A says IssuesFound"
    assert (error.rule, error.status, error.step) == ("B", RuleStatus.Error, 30)
    assert error.message == "B says Error" and error.tensor is None


def test_issues_found_asks_for_a_plan() -> None:
    state = decided(running_state(), describe("Stopping", ("A", "IssuesFound")))
    assert state.next_action is NextAction.launch_new
    assert state.rule_status is RuleStatus.IssuesFound
    assert state.history.num_monitor_transitions == 1
    assert state.current_attempt.findings[0].tensor == "gradient/head.weight"


def test_completed_only_once_rules_are_final() -> None:
    early = describe("Completed", ("A", "InProgress"))
    assert decided(running_state(), early).next_action is NextAction.monitor
    done = describe(
        "Completed",
        ("A", "NoIssuesFound"),
        final_metrics={"test:accuracy": 0.9},
        progress={"step": 120},
    )
    state = decided(running_state(), done)
    assert state.next_action is NextAction.end
    attempt = state.current_attempt
    assert attempt.outcome is JobStatus.Completed
    assert (attempt.final_accuracy, attempt.steps_run) == (0.9, 120)


def test_failures_infrastructure_relaunches_algorithm_ends() -> None:
    infra = describe("Failed", failure_reason="InternalServerError: killed by SIGKILL")
    state = decided(running_state(), infra)
    assert state.next_action is NextAction.launch_new
    assert state.planned_change.strategy == "relaunch_unchanged"
    algo = describe("Failed", failure_reason="AlgorithmError: exit code 1: ValueError")
    state = decided(running_state(), algo)
    assert state.next_action is NextAction.end and "AlgorithmError" in state.end_reason


def test_transition_budget() -> None:
    state = running_state().model_copy(
        update={
            "budgets": running_state().budgets.model_copy(update={"max_monitor_transitions": 1})
        }
    )
    running = describe("InProgress", ("A", "InProgress"))
    state = decided(state, running)
    assert state.next_action is NextAction.monitor
    state = decided(state, running)
    assert state.next_action is NextAction.end and "max_monitor_transitions" in state.end_reason


def test_the_progress_line_says_why_a_job_has_not_started() -> None:
    waiting = describe("InProgress", status_message="waiting for 1 free GPU(s): all of 0 are taken")
    line = progress_line(running_state(), waiting)
    assert "| InProgress | waiting for 1 free GPU(s): all of 0 are taken |" in line
    assert "| starting |" in progress_line(running_state(), describe("InProgress"))


def test_a_completed_job_with_a_rule_in_error_is_not_clean() -> None:
    """Issue 12: a rule that read nothing (or broke) leaves the job unwatched; the run ends,
    but is not called clean, and the attempt keeps the rule's words."""
    done = describe(
        "Completed",
        ("Guard", "NoIssuesFound"),
        ("Dead", "Error"),
        progress={"step": 120, "loss": 0.1, "first_loss": 2.3},
        final_metrics={"train:loss": 0.1},
    )
    state = decided(running_state(), done)
    assert state.next_action is NextAction.end
    assert state.rule_status is RuleStatus.Error
    attempt = state.current_attempt
    assert attempt.findings == []  # nothing for a strategy to repair
    assert [(e.rule, e.status, e.message) for e in attempt.rule_errors] == [
        ("Dead", RuleStatus.Error, "Dead says Error")
    ]
    assert state.end_reason == (
        "completed, but the run is not clean: rule Dead could not judge the job: Dead says Error"
    )


def test_the_progress_line_shows_what_the_job_knows() -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    now = started + timedelta(seconds=40)
    script = describe("InProgress", started=started, progress={"step": 120, "loss": 0.5312})
    line = progress_line(running_state(), script, now)
    assert "| step 120, 3 steps/s, 40 s, loss 0.5312 |" in line  # no total, no epoch
    known = {"step": 120, "start_step": 20, "total_steps": 500, "epoch": 2, "loss": None}
    builtin = describe("InProgress", started=started, progress=known)
    line = progress_line(running_state(), builtin, now)
    assert "| step 120/500, epoch 2, 2.5 steps/s, 40 s, loss non-finite |" in line


def script_of_400_updates() -> State:
    """A running attempt of a script whose length flag (max_iters 400) maps max_steps."""
    spec = RunSpec(
        entry_point="train.py",
        hyperparameters={"max_iters": 400},
        hyperparameter_roles={"max_steps": "max_iters"},
    )
    return begin_attempt(State(run_spec=spec), "j")


def test_a_scripts_stated_length_is_shown_and_asked_at_half() -> None:
    """A script that maps its length flag (max_steps) gets step N/total in its progress
    line, and at half its length a loss not yet 5 % below its start is NotTrained."""
    state = script_of_400_updates()
    flat = {"first_loss": 5.7, "first_losses": [5.7] * 20, "last_losses": [5.6] * 20}
    at = describe("InProgress", progress={"step": 200, "loss": 5.6, **flat})
    snapshot = with_stated_length(state, at)
    assert "| step 200/400, loss 5.6 |" in progress_line(state, snapshot)
    found = early_finding(state, snapshot, list)
    assert found is not None and found.rule == NOT_TRAINED and found.step == 199
    after = decide(state, observe(snapshot), snapshot, "jobs/j/metrics.jsonl", found)
    assert after.rule_status is RuleStatus.IssuesFound
    assert after.next_action is NextAction.launch_new  # the flow stops the job, then plans
    assert after.current_attempt is not None and after.current_attempt.findings == [found]
    before_half = with_stated_length(state, describe("InProgress", progress={"step": 199, **flat}))
    assert early_finding(state, before_half, list) is None
    unstated = begin_attempt(State(run_spec=RunSpec(entry_point="train.py")), "j")
    assert early_finding(unstated, with_stated_length(unstated, at), list) is None


def test_a_scripts_stated_epoch_gives_its_length_before_any_epoch_ends() -> None:
    """A script that batches by hand (no DataLoader: the launcher measures no epoch) and
    states updates_per_epoch: its length is that times its epochs flag from its first look,
    and the stated epoch counts over one the job measured."""
    spec = RunSpec(
        entry_point="main.py", hyperparameters={"epochs": 4, "lr": 0.02},
        hyperparameter_roles={"num_epochs": "epochs"}, updates_per_epoch=45,
    )  # fmt: skip
    state = begin_attempt(State(run_spec=spec), "j")
    flat = {"first_loss": 5.7, "first_losses": [5.7] * 20, "last_losses": [5.6] * 20}
    at = with_stated_length(state, describe("InProgress", progress={"step": 90, **flat}))
    assert at.progress is not None and at.progress.total_steps == 180
    assert "| step 90/180, loss" in progress_line(state, at)
    found = early_finding(state, at, list)
    assert found is not None and found.rule == NOT_TRAINED
    assert "by update 90, half of the job's 180" in found.message
    measured = describe("InProgress", progress={"step": 90, "steps_per_epoch": 50, **flat})
    known = with_stated_length(state, measured).progress
    assert known is not None and known.total_steps == 180


def test_the_monitor_looks_again_when_the_job_reaches_a_quarter_and_half_its_length() -> None:
    """At the pace of its steps since the last look: 150 of 400 done, 100 more in the last
    2 s, so half (200) comes in 1 s; 60 done, 50 in 2 s, so a quarter (100) in 1.6 s; soon,
    but not at once; past half, not asked (a warm start), not known (no length, no pace, no
    earlier look, a job that ended): the usual poll."""
    import math

    from remedy.decisions.observe import SOONEST_LOOK_S, until_asked_s

    at = describe("InProgress", progress={"step": 150, "total_steps": 400})
    assert until_asked_s(at, (50, 10.0), 12.0) == pytest.approx(1.0)
    before_quarter = describe("InProgress", progress={"step": 60, "total_steps": 400})
    assert until_asked_s(before_quarter, (10, 10.0), 12.0) == pytest.approx(1.6)
    near = describe("InProgress", progress={"step": 199, "total_steps": 400})
    assert until_asked_s(near, (99, 10.0), 12.0) == SOONEST_LOOK_S
    warm = describe("InProgress", progress={"step": 150, "start_step": 100, "total_steps": 400})
    past = describe("InProgress", progress={"step": 201, "total_steps": 400})
    unknown = describe("InProgress", progress={"step": 150})
    ended = describe("Completed", progress={"step": 150, "total_steps": 400})
    for snapshot, before in ((past, (101, 10.0)), (warm, (50, 10.0)), (unknown, (50, 10.0)),
                             (at, None), (at, (150, 10.0)), (ended, (50, 10.0))):  # fmt: skip
        assert until_asked_s(snapshot, before, 12.0) == math.inf


def test_a_running_job_whose_gradients_agree_is_asked_at_a_quarter_from_its_records() -> None:
    """At a quarter of its stated length, a script whose loss has not moved is asked from
    its step records so far: gradients sampled every 5 updates that still agree (a rate far
    too small) make it LearningTooSlowly there; records that disagree leave it to half,
    and a later look before half does not read them again."""
    state = script_of_400_updates()
    flat = {"first_loss": 5.7, "first_losses": [5.7] * 20, "last_losses": [5.68] * 20}
    at = with_stated_length(state, describe("InProgress", progress={"step": 100, **flat}))

    def records(agreement: float) -> list[dict[str, object]]:
        steps: list[dict[str, object]] = []
        for step in range(100):
            record: dict[str, object] = {
                "type": "step",
                "step": step,
                "loss": 5.7 - (step % 2) * 0.01,
            }
            if step % 5 == 0:
                record |= {"grad_agreement_1": agreement, "grad_agreement_5": agreement}
            steps.append(record)
        return steps

    found = early_finding(state, at, lambda: records(0.9))
    assert found is not None and found.rule == LEARNING_TOO_SLOWLY
    assert "by update 100, a quarter of the job's 400" in found.message
    assert early_finding(state, at, lambda: records(-0.1), (60, 10.0)) is None
    read: list[int] = []

    def counted() -> list[dict[str, object]]:
        read.append(1)
        return records(0.9)

    later = with_stated_length(state, describe("InProgress", progress={"step": 150, **flat}))
    assert early_finding(state, later, counted, (100, 10.0)) is None  # asked at 100
    assert read == []


@pytest.mark.adversarial("fault injection", fails_as="silently wrong")
def test_no_rule_is_in_progress_once_a_job_that_ran_no_update_ended(tmp_path: Path) -> None:
    """A real job that completes without one training step: its evaluator stops having
    judged nothing; the rule ends in Error, saying so, never InProgress."""
    from remedy.jobs.local import LocalBackend
    from remedy.state_schema import RuleSpec, RunSpec
    from tests.helpers.local_jobs import wait_final

    backend = LocalBackend(tmp_path / "run")
    rules = [RuleSpec(name="Loss", rule="LossNotDecreasing")]
    backend.launch("job", RunSpec(entry_point="tests.jobs.entry_points.quick", rules=rules))
    seen = observe(wait_final(backend, "job", timeout=120))
    assert seen.job_status is JobStatus.Completed
    assert seen.rule_status is RuleStatus.Error
    [error] = seen.rule_errors
    assert error.rule == "Loss" and "the job ended before this rule judged" in error.message


def test_a_completed_job_whose_model_learned_nothing_is_a_finding() -> None:
    """No rule fired, the job completed, and the loss did not fall: the verdict's own
    finding (NOT_TRAINED), so the policy repairs it instead of the run ending."""
    from remedy.state_schema import NOT_TRAINED

    flat = describe(
        "Completed",
        ("Guard", "NoIssuesFound"),
        progress={"step": 120, "loss": 2.29, "first_loss": 2.31},
        final_metrics={"train:loss": 2.29, "test:accuracy": 0.5},
    )
    state = decided(running_state(), flat)
    assert state.next_action is NextAction.launch_new
    assert state.rule_status is RuleStatus.IssuesFound
    (found,) = state.current_attempt.findings
    assert (found.rule, found.rule_class, found.step) == (NOT_TRAINED, NOT_TRAINED, 119)
    assert found.message.startswith("the model did not train: final training loss 2.29")
    # a job that did not say enough to judge ends not clean: nothing to repair
    silent = describe(
        "Completed", ("Guard", "NoIssuesFound"), progress={"step": 119, "steps_run": 120}
    )
    ended = decided(running_state(), silent)
    assert ended.next_action is NextAction.end and not ended.current_attempt.findings
    assert "cannot tell whether the model trained" in ended.end_reason


def test_a_job_of_several_optimizers_without_criteria_is_not_judged_by_its_losses() -> None:
    """Two optimizers over parameters of their own (a GAN): a loss rule's finding is no
    repair's cause; the run ends, saying what to state. With one optimizer the same
    finding is acted on."""
    progress = {"step": 133, "optimizers": 2}
    finding = ("DivergingLoss", "IssuesFound")
    gan = decided(running_state(), describe("InProgress", finding, progress=progress))
    assert gan.next_action is NextAction.end and gan.rule_status is RuleStatus.Stopped
    assert gan.findings == [] and gan.end_reason is not None
    assert gan.end_reason.startswith("not judged: job j steps 2 optimizers over parameters")
    assert "State success_criteria" in gan.end_reason
    assert gan.current_attempt is not None and gan.current_attempt.findings  # kept, not acted on
    one = decided(running_state(), describe("InProgress", finding, progress={"step": 133}))
    assert one.next_action is NextAction.launch_new


def test_a_job_of_several_optimizers_with_criteria_is_judged_by_gradient_rules_only() -> None:
    """With success_criteria, the rules that read the loss (their class's READS) are what
    cannot judge it: the run ends naming them, whether or not they fired; a gradient
    rule's finding is acted on, and with gradient rules only the job runs on."""
    criteria = [{"metric": "test:ring_error", "op": "<", "value": 0.3}]
    stated = begin_attempt(State(run_spec=RunSpec(success_criteria=criteria)), "j")
    progress = {"step": 133, "optimizers": 2}
    quiet_loss_rules = describe(
        "InProgress", ("ExplodingTensor", "InProgress"), ("LossPlateau", "InProgress"),
        ("DivergingLoss", "InProgress"), progress=progress,
    )  # fmt: skip
    ended = decided(stated, quiet_loss_rules)
    assert ended.next_action is NextAction.end and ended.end_reason is not None
    assert ended.end_reason.endswith(
        "the rules that read the loss cannot judge it: DivergingLoss, LossPlateau. State "
        "rules that read gradients only, beside its success_criteria "
        "(docs/job-contract.md, 'Several optimizers')"
    )
    gradients_only = describe("InProgress", ("ExplodingTensor", "IssuesFound"), progress=progress)
    assert decided(stated, gradients_only).next_action is NextAction.launch_new
    running = describe("InProgress", ("ExplodingTensor", "InProgress"), progress=progress)
    assert decided(stated, running).next_action is NextAction.monitor
    # a user's name for a loss rule: its class says what it reads
    named = JobSnapshot(
        name="j", status="InProgress", progress=progress,
        rules=[{"RuleConfigurationName": "Spikes", "RuleEvaluationStatus": "InProgress",
                "rule": "LossSpike"}],
    )  # fmt: skip
    assert (decided(stated, named).end_reason or "").endswith(
        "cannot judge it: Spikes. State rules that read gradients only, beside its "
        "success_criteria (docs/job-contract.md, 'Several optimizers')"
    )


def test_a_cold_start_is_looked_at_often_until_its_pace_is_known() -> None:
    """A tiny job (a few seconds in all) can pass a quarter of its length between two of the
    usual looks, 2 s apart, before its pace is known: in its first YOUNG_S seconds of
    running, a job no earlier look saw progress in is looked at every YOUNG_LOOK_S, and
    SOONEST_LOOK_S after the first look that sees it: two looks give its pace. Once a
    look saw its progress (until_asked_s knows its pace), later, a job still queued, and a
    warm start (not asked): the usual poll."""
    import math

    from remedy.decisions.observe import SOONEST_LOOK_S, YOUNG_LOOK_S, YOUNG_S, young_look_s

    state = begin_attempt(State(run_spec=RunSpec(entry_point="train.py")), "j")
    began = datetime(2026, 11, 28, 7, 0, tzinfo=UTC)
    running = describe("InProgress", started=began, progress={"step": 10})
    soon = began + timedelta(seconds=1)
    assert young_look_s(state, running, None, soon) == SOONEST_LOOK_S  # its pace, next look
    starting = describe("InProgress", started=began)  # no progress yet
    assert young_look_s(state, starting, None, soon) == YOUNG_LOOK_S
    assert young_look_s(state, running, (5, 0.0), soon) == math.inf  # its pace is known
    later = began + timedelta(seconds=YOUNG_S + 1)
    assert young_look_s(state, running, None, later) == math.inf
    queued = describe("InProgress")
    assert young_look_s(state, queued, None, soon) == math.inf
    warm = update_current_attempt(state, start_step=100)
    assert young_look_s(warm, running, None, soon) == math.inf


def test_the_hold_point_a_job_says_is_recorded_on_an_attempt_told_to_hold_by_epochs() -> None:
    """A job told to hold by its epochs says where once it measured one (hold_at in its
    progress: a quarter of 8 x 43); the monitor records it on the attempt with the epoch
    (its length, for the next point), which is then held as one whose hold points were
    known at launch. Said by a job not told to, or said no more, nothing."""
    spec = RunSpec(
        entry_point="train.py", hyperparameters={"epochs": 8},
        hyperparameter_roles={"num_epochs": "epochs"},
    )  # fmt: skip
    told = update_current_attempt(
        begin_attempt(State(run_spec=spec), "j"), holds_by_its_epochs=True
    )
    measured = describe("InProgress", progress={"step": 50, "steps_per_epoch": 43, "hold_at": 86})
    held = with_job_hold(told, measured).current_attempt
    assert held is not None and (held.hold_at, held.holds_by_its_epochs) == (86, False)
    assert held.epoch_updates == 43
    before = describe("InProgress", progress={"step": 20})
    assert with_job_hold(told, before) == told  # not measured yet
    not_told = begin_attempt(State(run_spec=spec), "j")
    assert with_job_hold(not_told, measured) == not_told


def test_a_job_that_cannot_measure_its_epoch_is_warned_of_once_and_waited_for_no_more() -> None:
    """Told to hold by its epochs, a job batching its data by hand says it cannot measure
    one (epoch_unmeasured in its progress): on the run's first attempt the monitor warns,
    naming the epochs flag and what to state instead, and the attempt waits for no hold;
    the next look says nothing more, and a later attempt of the same script is not warned
    again. A job that measures its epoch, or one not told to hold, is left as it is."""
    spec = RunSpec(
        entry_point="train.py", hyperparameters={"n-epochs": 8},
        hyperparameter_roles={"num_epochs": "n-epochs"},
    )  # fmt: skip
    told = update_current_attempt(
        begin_attempt(State(run_spec=spec), "j"), holds_by_its_epochs=True
    )
    by_hand = describe("InProgress", progress={"step": 3, "epoch_unmeasured": True})
    state, said = unmeasured_epoch(told, by_hand)
    assert said is not None
    assert "its epochs flag (n-epochs) is mapped" in said
    assert '"updates_per_epoch": <updates>' in said and "max_steps" in said
    assert state.current_attempt is not None and not state.current_attempt.holds_by_its_epochs
    assert unmeasured_epoch(state, by_hand) == (state, None)  # said once
    later = update_current_attempt(begin_attempt(state, "j"), holds_by_its_epochs=True)
    quiet, again = unmeasured_epoch(later, by_hand)
    assert again is None
    assert quiet.current_attempt is not None and not quiet.current_attempt.holds_by_its_epochs
    measuring = describe("InProgress", progress={"step": 3})
    assert unmeasured_epoch(told, measuring) == (told, None)
    not_told = begin_attempt(State(run_spec=spec), "j")
    assert unmeasured_epoch(not_told, by_hand) == (not_told, None)
    # a DataLoader script that leaves its loop at a step limit of its own ends no pass:
    # said once it ran to its end with no epoch measured (not while it runs, not when a
    # rule stopped it before its first pass could end)
    no_pass = {"step": 40}
    assert unmeasured_epoch(told, describe("InProgress", progress=no_pass)) == (told, None)
    assert unmeasured_epoch(told, describe("Stopped", progress=no_pass)) == (told, None)
    ended, said = unmeasured_epoch(told, describe("Completed", progress=no_pass))
    assert said is not None and "ended no pass over its DataLoader" in said
    assert ended.current_attempt is not None and not ended.current_attempt.holds_by_its_epochs
    measured = describe("Completed", progress=no_pass | {"steps_per_epoch": 10})
    assert unmeasured_epoch(told, measured) == (told, None)

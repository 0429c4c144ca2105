"""The monitor's reading of a job description and its choice of the next action."""

from __future__ import annotations

from typing import Any

from remedy.state_schema import JobStatus, NextAction, RuleStatus, State
from remedy.state_schema.transitions import begin_attempt
from remedy.tasks.monitor import decide, observe


def describe(job: str, *rules: tuple[str, str], **extra: Any) -> dict[str, Any]:
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
    return {
        "TrainingJobName": "j",
        "TrainingJobStatus": job,
        "DebugRuleEvaluationStatuses": statuses,
        **extra,
    }


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
    assert observe(describe("Completed", ("A", "Weird"))).rule_status is RuleStatus.Unknown


def test_issues_found_asks_for_a_plan() -> None:
    state = decide(running_state(), observe(d := describe("Stopping", ("A", "IssuesFound"))), d)
    assert state.next_action is NextAction.launch_new
    assert state.rule_status is RuleStatus.IssuesFound
    assert state.history.num_monitor_transitions == 1
    assert state.current_attempt.findings[0].tensor == "gradient/head.weight"


def test_completed_only_once_rules_are_final() -> None:
    early = describe("Completed", ("A", "InProgress"))
    assert decide(running_state(), observe(early), early).next_action is NextAction.monitor
    done = describe(
        "Completed",
        ("A", "NoIssuesFound"),
        FinalMetricDataList=[{"MetricName": "test:accuracy", "Value": 0.9}],
        Progress={"step": 120},
    )
    state = decide(running_state(), observe(done), done)
    assert state.next_action is NextAction.end
    attempt = state.current_attempt
    assert attempt.outcome is JobStatus.Completed
    assert (attempt.final_accuracy, attempt.steps_run) == (0.9, 120)


def test_failures_infrastructure_relaunches_algorithm_ends() -> None:
    infra = describe("Failed", FailureReason="InternalServerError: killed by SIGKILL")
    state = decide(running_state(), observe(infra), infra)
    assert state.next_action is NextAction.launch_new
    assert state.planned_change.strategy == "relaunch_unchanged"
    algo = describe("Failed", FailureReason="AlgorithmError: exit code 1: ValueError")
    state = decide(running_state(), observe(algo), algo)
    assert state.next_action is NextAction.end and "AlgorithmError" in state.end_reason


def test_transition_budget() -> None:
    state = running_state().model_copy(
        update={
            "budgets": running_state().budgets.model_copy(update={"max_monitor_transitions": 1})
        }
    )
    running = describe("InProgress", ("A", "InProgress"))
    state = decide(state, observe(running), running)
    assert state.next_action is NextAction.monitor
    state = decide(state, observe(running), running)
    assert state.next_action is NextAction.end and "max_monitor_transitions" in state.end_reason

"""The monitor carries the NaN guard's bundle and bad records into findings and traces data."""

from __future__ import annotations

from typing import Any

from remedy.decisions.observe import decide, observe
from remedy.jobs import JobSnapshot
from remedy.state_schema import DataProblem, Finding, JobStatus, RunSpec, State
from remedy.state_schema.transitions import begin_attempt, update_current_attempt
from remedy.strategies import get_policy
from remedy.strategies.drop_bad_samples import DropBadSamples


def guard_description(job: str, suspects: list[int], **extra: Any) -> JobSnapshot:
    status = {
        "RuleConfigurationName": "NonFiniteGradient",
        "RuleEvaluationStatus": "IssuesFound",
        "StatusDetails": "1 non-finite update(s), latest at step 3",
        "step": 3,
        "tensor": None,
        "bundle": f"/runs/x/jobs/{job}/repro/step-000003",
        "localisation": "forward stem",
        "suspect_samples": suspects,
        "suspect_shards": [f"data_batch_2:{i - 20}" for i in suspects],
        **extra,
    }
    return JobSnapshot(name=job, status="Stopped", rules=[status])


def after_failure(state: State, job: str, suspects: list[int]) -> State:
    state = begin_attempt(state, job)
    description = guard_description(job, suspects)
    return decide(state, observe(description), description, f"jobs/{job}/metrics.jsonl")


def test_the_bundle_and_localisation_reach_the_finding() -> None:
    finding = observe(guard_description("j1", [23])).findings[0]
    assert finding.rule == "NonFiniteGradient" and finding.step == 3
    assert finding.bundle == "/runs/x/jobs/j1/repro/step-000003"
    assert finding.localisation == "forward stem"
    assert finding.suspect_samples == [23] and finding.suspect_shards == ["data_batch_2:3"]
    assert finding.data_problem is None


def test_the_same_samples_failing_again_are_a_data_problem() -> None:
    state = after_failure(State(), "j1", [23])
    assert state.findings[0].data_problem is None  # once: only a suspect
    state = after_failure(state, "j2", [23, 31])
    problem = state.findings[0].data_problem
    assert problem == DataProblem(samples=[23], shards=["data_batch_2:3"], failures=2)
    assert state.current_attempt is not None
    assert state.current_attempt.findings[0].data_problem == problem
    state = after_failure(state, "j3", [23])
    assert state.findings[0].data_problem.failures == 3  # type: ignore[union-attr]


def test_different_samples_or_a_model_problem_are_not_a_data_problem() -> None:
    state = after_failure(State(), "j1", [23])
    assert after_failure(state, "j2", [5]).findings[0].data_problem is None
    state = after_failure(State(), "j1", [])
    assert after_failure(state, "j2", []).findings[0].data_problem is None


def test_a_data_problem_reported_by_the_job_itself_is_kept() -> None:
    reported = {"samples": [7], "shards": ["synthetic:7"], "failures": 3}
    description = guard_description("j1", [7], data_problem=reported)
    assert observe(description).findings[0].data_problem == DataProblem(**reported)


def test_drop_bad_samples_leaves_out_the_data_problem_samples() -> None:
    problem = DataProblem(samples=[23, 4], shards=["a:3", "a:4"], failures=2)
    findings = [Finding(rule="NonFiniteGradient", data_problem=problem), Finding(rule="X")]
    strategy = DropBadSamples.for_findings(findings)
    spec = RunSpec(exclude_samples=[4, 9])
    assert strategy.applies(spec)
    after = strategy.apply(spec)
    assert after.exclude_samples == [4, 9, 23]
    assert not strategy.applies(after)  # nothing left to drop
    assert "exclude_samples [4, 9] -> [4, 9, 23]" in strategy.reason(spec, after)
    assert not DropBadSamples().applies(spec)  # without findings it has nothing to drop


def test_the_seed_policy_still_ignores_which_rule_fired() -> None:
    state = begin_attempt(State(), "j1")
    state = update_current_attempt(state, outcome=JobStatus.Stopped)
    finding = Finding(rule="NonFiniteGradient", data_problem=DataProblem(samples=[23]))
    chosen = get_policy("seed").decide(state, [finding], None).strategy
    assert chosen is not None and chosen.name == "lower_warmup_lr"

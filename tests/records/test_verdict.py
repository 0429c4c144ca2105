"""A run is clean in one place: completed, no finding, and it trained."""

from __future__ import annotations

from remedy.records.verdict import attempt_flaw, run_is_clean
from remedy.state_schema import Finding, JobStatus, State
from remedy.state_schema.transitions import begin_attempt, update_current_attempt


def ended(**fields: object) -> State:
    return update_current_attempt(begin_attempt(State(), "j"), **fields)


def test_a_completed_attempt_that_trained_is_clean() -> None:
    assert run_is_clean(ended(outcome=JobStatus.Completed, steps_run=12))


def test_what_is_not_clean_and_why() -> None:
    assert not run_is_clean(State())
    assert attempt_flaw(None) == "no job was launched"
    stopped = ended(outcome=JobStatus.Stopped, steps_run=12)
    assert attempt_flaw(stopped.current_attempt) == "the job ended Stopped"
    found = ended(outcome=JobStatus.Completed, steps_run=12, findings=[Finding(rule="Overfit")])
    assert attempt_flaw(found.current_attempt) == "Overfit reported an issue"
    idle = ended(outcome=JobStatus.Completed, steps_run=0)
    assert not run_is_clean(idle)
    assert "without running a single update" in attempt_flaw(idle.current_attempt)

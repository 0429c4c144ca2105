"""The remediate flow against a real Prefect server with real jobs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from prefect.states import StateType

from remedy.debugger import create_trial
from remedy.flows.remediate import RemediateSettings, remediate
from remedy.jobs.local import LocalBackend
from remedy.state_schema import (
    Budgets,
    JobStatus,
    NextAction,
    RunSpec,
    State,
    exploding_tensor_rule,
    load_state,
)
from tests.flows.specs import tiny_spec

FAST = RemediateSettings(poll_interval_s=0.5)


def run(state: State, run_dir: Path, ends: StateType = StateType.COMPLETED) -> State:
    """The final payload of a run that ends in Prefect's state `ends`: a run that did not
    end clean is Failed, with its end reason as the message and its payload as the data."""
    flow_state = remediate(state=state, run_dir=str(run_dir), settings=FAST, return_state=True)
    final = flow_state.result(raise_on_failure=False)
    assert flow_state.type is ends, flow_state
    if ends is StateType.FAILED:
        assert flow_state.message == final.end_reason
    assert load_state(run_dir / "state.json") == final  # persisted as returned
    return final


@pytest.mark.slow
def test_real_explosion_is_detected_stopped_repaired_and_completed(
    prefect_api_url: str, tmp_path: Path
) -> None:
    # warmup 0.003125: the seed ladder's next step is batch norm, so two attempts. The NaN
    # guard is off: this is the debugger's path (tests/flows/test_nan_guard.py: the guard's),
    # with the seed's one rule (the default set's DivergingLoss may see the loss climb first).
    spec = tiny_spec(
        warmup_learning_rate=0.003125, nan_guard="off", rules=[exploding_tensor_rule()]
    )
    state = State(run_spec=spec, policy="seed")
    final = run(state, tmp_path)

    first, second = final.history.attempts
    finding = first.findings[0]
    assert finding.rule == "ExplodingTensor" and finding.tensor.startswith("gradient/")
    assert first.outcome is JobStatus.Stopped
    assert first.steps_run < 64  # stopped early, not run to the end (8 epochs x 8 steps)
    # The finding is real: the stored gradient at that step is non-finite.
    store = tmp_path / "jobs" / first.job_name / "tensors"
    value = create_trial(store).tensor(finding.tensor).value(finding.step)
    assert not np.isfinite(value).all()

    assert second.strategy == "add_batch_norm" and second.changes == {"add_batch_norm": [0, 1]}
    assert second.outcome is JobStatus.Completed and second.findings == []
    assert second.final_accuracy is not None
    assert final.next_action is NextAction.end and final.job_status is JobStatus.Completed
    h = final.history
    assert (h.num_retraining, h.num_batch_layer_adjustments, h.num_warmup_adjustments) == (2, 1, 0)

    journal = [json.loads(line) for line in (tmp_path / "transitions.jsonl").open()]
    assert journal[0]["event"] == "start" and journal[-1]["next_action"] == "end"
    assert [e["event"] for e in journal].count("launching") == 2


def test_infrastructure_failure_relaunches_unchanged(prefect_api_url: str, tmp_path: Path) -> None:
    spec = RunSpec(entry_point="tests.jobs.entry_points.flaky", rules=[])
    final = run(State(run_spec=spec), tmp_path)
    first, second = final.history.attempts
    assert first.outcome is JobStatus.Failed and "SIGKILL" in (first.failure_reason or "")
    assert second.strategy == "relaunch_unchanged" and second.spec == first.spec
    assert second.outcome is JobStatus.Completed


def test_algorithm_error_ends_the_flow(prefect_api_url: str, tmp_path: Path) -> None:
    spec = RunSpec(entry_point="tests.jobs.entry_points.crashes", rules=[])
    final = run(State(run_spec=spec), tmp_path, ends=StateType.FAILED)
    assert len(final.history.attempts) == 1
    assert final.next_action is NextAction.end
    assert "AlgorithmError" in (final.end_reason or "")


def test_retraining_budget_ends_the_flow(prefect_api_url: str, tmp_path: Path) -> None:
    spec = RunSpec(entry_point="tests.jobs.entry_points.flaky", rules=[])
    state = State(run_spec=spec, budgets=Budgets(max_num_retraining=1))
    final = run(state, tmp_path, ends=StateType.FAILED)
    assert len(final.history.attempts) == 1
    assert final.end_reason.startswith("max_num_retraining (1) reached; the last attempt: ")


def test_monitor_transition_budget_stops_the_job(prefect_api_url: str, tmp_path: Path) -> None:
    spec = RunSpec(entry_point="tests.jobs.entry_points.obedient", rules=[])
    state = State(run_spec=spec, budgets=Budgets(max_monitor_transitions=1))
    flow_state = remediate(
        state=state,
        run_dir=str(tmp_path),
        settings=RemediateSettings(poll_interval_s=0.2, max_wait_s=1.0),
        return_state=True,
    )
    final = flow_state.result(raise_on_failure=False)
    assert flow_state.is_failed() and flow_state.message == final.end_reason
    assert "max_monitor_transitions (1) exceeded" in (final.end_reason or "")
    job = final.history.latest_job_name
    assert LocalBackend(tmp_path).describe(job).status == "Stopped"
    assert final.history.attempts[0].outcome is JobStatus.Stopped

"""A late spike: roll back to the last clean checkpoint and pass over the batches around it;
a second spike where the batches were already skipped escalates."""

from __future__ import annotations

import pytest

from remedy.decisions.plan import plan_next
from remedy.state_schema import Finding, RunSpec, State
from remedy.state_schema.hyperparameters import StepWindow
from remedy.state_schema.transitions import begin_attempt, update_current_attempt
from remedy.strategies import Checkpoint
from remedy.strategies.warm_start import update_of

CKPTS = [Checkpoint(f"/c/step-{s:09d}", epoch=s // 100, step=s) for s in (100, 200, 300)]


def spike(step: int, rule: str = "LossSpike") -> list[Finding]:
    return [Finding(rule=rule, step=step, tensor="loss")]


def test_hook_steps_map_to_updates_past_the_skipped_ones() -> None:
    assert update_of(0) == 1
    assert update_of(9, start_step=200) == 210
    skipped = [StepWindow(first=205, last=214)]  # the hook counted none of these 10
    assert update_of(3, start_step=200, skipped=skipped) == 204
    assert update_of(4, start_step=200, skipped=skipped) == 215
    assert update_of(4, start_step=300, skipped=skipped) == 305  # all before this launch


def launched(spec: RunSpec, start_step: int = 0) -> State:
    state = begin_attempt(State(policy="adaptive", run_spec=spec), "job-1")
    return update_current_attempt(state, start_step=start_step)


@pytest.mark.parametrize("rule", ["LossSpike", "GradientNormSpike"])
def test_a_late_spike_rolls_back_and_skips_the_batches_around_it(rule: str) -> None:
    state = launched(RunSpec(debugger_save_interval=10, checkpoint_every_steps=100))
    state = plan_next(state, spike(249, rule), CKPTS)  # update 250
    change, spec = state.planned_change, state.run_spec
    assert change.strategy == "rollback_and_skip"
    assert spec.skip_steps == [StepWindow(first=240, last=260)]
    assert spec.init_checkpoint == "/c/step-000000200"  # the last before update 240
    assert spec.learning_rate == 0.1  # nothing else changed
    assert "skip_steps += steps 240-260" in change.reason
    assert "warm start from epoch 2 (step 200)" in change.reason


def retry_of(first: State) -> State:
    retry = begin_attempt(first, "job-2")
    return update_current_attempt(retry, start_step=200)  # warm-started from step 200


def test_a_second_spike_elsewhere_rolls_back_again_and_at_the_same_place_escalates() -> None:
    first = plan_next(launched(RunSpec(debugger_save_interval=10)), spike(249), CKPTS)
    assert first.run_spec.skip_steps == [StepWindow(first=240, last=260)]

    # Hook step 100 of the retry is update 322 (the 21 skipped were never hook steps).
    elsewhere = plan_next(retry_of(first), spike(100), CKPTS)
    assert elsewhere.planned_change.strategy == "rollback_and_skip"
    assert elsewhere.run_spec.skip_steps == [
        StepWindow(first=240, last=260),
        StepWindow(first=312, last=332),
    ]
    assert elsewhere.run_spec.init_checkpoint == "/c/step-000000300"

    # Update 267, next to the batches already skipped: skipping did not help there.
    same_place = plan_next(retry_of(first), spike(45), CKPTS)
    assert same_place.planned_change.strategy == "search_lr_down"
    assert same_place.run_spec.skip_steps == first.run_spec.skip_steps


def test_without_a_clean_checkpoint_there_is_nothing_to_roll_back_to() -> None:
    state = plan_next(launched(RunSpec(debugger_save_interval=10)), spike(49), CKPTS)
    assert state.planned_change.strategy == "search_lr_down"  # update 50: before any checkpoint
    assert state.run_spec.skip_steps == []


def test_a_spike_right_after_the_rate_rises_gets_the_rate_fixed_not_a_rollback() -> None:
    # 10 updates an epoch, two warmup epochs at 0.1, then a stage typed 10x too high.
    spec = RunSpec(
        train_samples=1000,
        batch_size=100,
        warmup_epochs=2,
        warmup_learning_rate=0.1,
        learning_rate=1.0,
        debugger_save_interval=1,
    )
    checkpoints = [Checkpoint(f"/c/epoch-{e:04d}", epoch=e, step=10 * e) for e in (1, 2, 3)]
    at_rise = plan_next(launched(spec), spike(21, "GradientNormSpike"), checkpoints)  # update 22
    assert at_rise.planned_change.strategy == "search_lr_down"
    assert at_rise.run_spec.learning_rate == pytest.approx(0.1)
    assert at_rise.run_spec.skip_steps == []
    assert at_rise.run_spec.init_checkpoint == "/c/epoch-0002"  # the rate's last sound update

    later = plan_next(launched(spec), spike(34, "GradientNormSpike"), checkpoints)  # update 35
    assert later.planned_change.strategy == "rollback_and_skip"
    assert later.run_spec.init_checkpoint == "/c/epoch-0003"

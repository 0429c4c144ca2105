"""Warm start: the relaunch starts from the last checkpoint taken before the problem began."""

from __future__ import annotations

from remedy.decisions.plan import plan_next
from remedy.state_schema import Finding, RunSpec, State
from remedy.state_schema.transitions import begin_attempt, update_current_attempt
from remedy.strategies import Checkpoint, pick_checkpoint

CKPTS = [Checkpoint(f"/c/epoch-{e:04d}", epoch=e, step=e * 79) for e in (1, 2, 3)]


def finding(step: int | None) -> list[Finding]:
    return [Finding(rule="ExplodingTensor", step=step, tensor="gradient/head.weight")]


def test_the_last_checkpoint_before_the_last_clean_observation_is_picked() -> None:
    # Fired at hook step 200, gradients saved every 5: step 195 was seen clean, so the
    # weights after 195 updates were sound; epoch 2 (step 158) is the last before that.
    assert pick_checkpoint(CKPTS, finding(200), save_interval=5) == CKPTS[1]
    # Fired at hook step 240 = 3*79 + 3: the epoch-3 checkpoint (237) is after the last
    # clean observation (235) and may already be poisoned.
    assert pick_checkpoint(CKPTS, finding(240), save_interval=5) == CKPTS[1]
    assert pick_checkpoint(CKPTS, finding(242), save_interval=5) == CKPTS[2]


def test_no_warm_start_before_the_first_checkpoint_or_without_a_step() -> None:
    assert pick_checkpoint(CKPTS, finding(5), save_interval=5) is None
    assert pick_checkpoint(CKPTS, finding(None), save_interval=5) is None
    assert pick_checkpoint([], finding(500), save_interval=5) is None


def test_steps_of_a_warm_started_job_count_from_its_start() -> None:
    # The job began at step 158 (epoch 2); its hook counts from 0 again.
    assert pick_checkpoint(CKPTS, finding(10), save_interval=5, start_step=158) == CKPTS[1]
    assert pick_checkpoint(CKPTS, finding(90), save_interval=5, start_step=158) == CKPTS[2]


def test_the_earliest_finding_decides() -> None:
    both = finding(300) + finding(100)
    assert pick_checkpoint(CKPTS, both, save_interval=5) == CKPTS[0]


def planned(strategy_findings: list[Finding], spec: RunSpec, policy: str = "adaptive") -> State:
    state = begin_attempt(State(policy=policy, run_spec=spec), "job-1")
    return plan_next(state, strategy_findings, CKPTS)


def test_a_weight_keeping_strategy_warm_starts_and_says_so() -> None:
    state = planned(finding(200), RunSpec(debugger_save_interval=5))
    spec, change = state.run_spec, state.planned_change
    assert change.strategy == "search_lr_down"
    assert (spec.init_checkpoint, spec.start_epoch) == ("/c/epoch-0002", 2)
    assert change.changes["init_checkpoint"] == [None, "/c/epoch-0002"]
    assert "warm start from epoch 2 (step 158)" in change.reason


def test_an_architecture_change_starts_from_scratch() -> None:
    spec = RunSpec(init_checkpoint="/c/epoch-0001", start_epoch=1, debugger_save_interval=5)
    config = {"ExplodingTensor": [{"strategy": "add_batch_norm"}]}
    state = begin_attempt(State(policy="adaptive", run_spec=spec, policy_config=config), "j")
    state = plan_next(state, finding(200), CKPTS)
    assert state.planned_change.strategy == "add_batch_norm"
    assert (state.run_spec.init_checkpoint, state.run_spec.start_epoch) == (None, 0)


def test_the_warm_started_attempt_offsets_its_findings() -> None:
    spec = RunSpec(debugger_save_interval=5)
    state = begin_attempt(State(policy="adaptive", run_spec=spec), "job-1")
    state = update_current_attempt(state, start_step=158)
    state = plan_next(state, finding(90), CKPTS)
    assert state.run_spec.init_checkpoint == "/c/epoch-0003"


def test_the_seed_policy_never_warm_starts() -> None:
    state = planned(finding(200), RunSpec(), policy="seed")
    assert state.planned_change.strategy == "lower_warmup_lr"
    assert state.run_spec.init_checkpoint is None

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from remedy.decisions.plan import plan_next
from remedy.state_schema import NextAction, Payload, RunSpec, State, save_state
from remedy.state_schema.transitions import begin_attempt, new_job_name
from remedy.strategies import STRATEGIES, get_policy, get_strategy
from tests.state_schema.seed_payload import SEED_FINAL_PAYLOAD


def seed_initial_state() -> State:
    """The original execution input: warmup 0.1, lr 0.1, no batch norm."""
    spec = Payload.model_validate(SEED_FINAL_PAYLOAD).state.run_spec.model_copy(
        update={"warmup_learning_rate": 0.1, "add_batch_norm": 0}
    )
    return State(run_spec=spec, policy="seed")


def plan_cli(state: State, finding: str, tmp_path) -> State:
    path = tmp_path / "state.json"
    save_state(path, state)
    out = subprocess.run(
        [sys.executable, "-m", "remedy", "plan", str(path), "--finding", finding],
        capture_output=True,
        text=True,
        check=True,
    )
    return Payload.model_validate_json(out.stdout).state


def test_seed_findings_through_remedy_plan_reproduce_the_seed_final_state(tmp_path) -> None:
    state = begin_attempt(seed_initial_state(), "job-1")
    launches = 1
    while True:
        state = plan_cli(state, "ExplodingTensor", tmp_path)
        assert state.next_action is NextAction.launch_new
        state = begin_attempt(state, f"job-{launches + 1}")
        launches += 1
        if state.run_spec.add_batch_norm == 1:
            break  # the original's batch-norm run completed
    expected = Payload.model_validate(SEED_FINAL_PAYLOAD).state
    assert state.run_spec == expected.run_spec
    h, e = state.history, expected.history
    assert launches == h.num_retraining == e.num_retraining == 7
    assert h.num_warmup_adjustments == e.num_warmup_adjustments == 5
    assert h.num_batch_layer_adjustments == e.num_batch_layer_adjustments == 1
    assert h.num_learning_rate_adjustments == 0
    assert [a.strategy for a in h.attempts] == [None] + ["lower_warmup_lr"] * 5 + ["add_batch_norm"]
    assert h.attempts[-1].changes == {"add_batch_norm": [0, 1]}


def test_ladder_then_lowers_lr_then_ends() -> None:
    spec = RunSpec(warmup_learning_rate=0.003125, add_batch_norm=1)
    state = State(run_spec=spec, policy="seed")
    lrs = []
    while (state := plan_next(state)).next_action is NextAction.launch_new:
        lrs.append(state.run_spec.learning_rate)
    assert lrs[0] == pytest.approx(0.09)
    assert lrs[-1] * 0.9 <= 0.001 < lrs[-1]
    assert state.history.num_learning_rate_adjustments == len(lrs)
    assert state.next_action is NextAction.end
    assert "no strategy left" in (state.end_reason or "")


def test_warmup_halving_stops_at_the_documented_bound() -> None:
    strategy = get_strategy("lower_warmup_lr")
    assert strategy.applies(RunSpec(warmup_learning_rate=0.00625))  # 0.00125 >= 1e-3
    assert not strategy.applies(RunSpec(warmup_learning_rate=0.003125))


def test_registry_and_unknown_names() -> None:
    assert {"lower_warmup_lr", "add_batch_norm", "lower_lr"} <= set(STRATEGIES)
    assert get_policy("seed").name == "seed"
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        get_policy("nope")
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        get_strategy("nope")


def test_plan_cli_rejects_bad_state_before_planning(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"state": {"next_action": "fly"}}))
    out = subprocess.run(
        [sys.executable, "-m", "remedy", "plan", str(bad), "--finding", "ExplodingTensor"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "state.next_action" in out.stderr


def test_job_names_are_unique_within_a_run() -> None:
    at = datetime(2021, 1, 27, 6, 45, 19, tzinfo=UTC)
    state = State()
    first = new_job_name(state, at)
    assert first == "complex-resnet-model-2021-Jan-27-06h-45m-19"
    state = begin_attempt(state, first)
    second = new_job_name(state, at)  # same second: must not collide
    assert second != first and second.startswith(first)

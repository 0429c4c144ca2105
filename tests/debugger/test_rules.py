from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from remedy.debugger import RULES, ModeKeys, Rule, create_trial, get_rule, register_rule
from remedy.debugger.rules.exploding_tensor import ExplodingTensor
from tests.debugger.helpers import (
    EXPLODING_LR,
    every_step_hook,
    first_nonfinite,
    new_store,
    train,
    write_step,
)


def run_rule(rule: Rule, mode: ModeKeys = ModeKeys.TRAIN) -> int | None:
    """Invoke over every step in order; the step where it first fires, or None."""
    for step in rule.trial.steps(mode):
        if rule.invoke_at_step(step, mode):
            return step
    return None


# -- registry and parameters ------------------------------------------------------------


def test_registry_knows_exploding_tensor() -> None:
    assert get_rule("ExplodingTensor") is ExplodingTensor
    assert RULES["ExplodingTensor"] is ExplodingTensor
    assert ExplodingTensor.defaults() == {
        "collection_names": None,
        "tensor_regex": None,
        "only_nan": False,
    }
    with pytest.raises(ValueError, match="unknown rule 'Nope'"):
        get_rule("Nope")


def test_parameters_are_validated(tmp_path: Path) -> None:
    trial = create_trial(tmp_path)
    with pytest.raises(ValueError, match="unknown parameter 'tensor_regexp'"):
        ExplodingTensor(trial, tensor_regexp=".*")
    with pytest.raises(ValueError, match="parameter 'only_nan' must be bool"):
        ExplodingTensor(trial, only_nan="yes")
    with pytest.raises(ValueError, match="parameter 'collection_names'"):
        ExplodingTensor(trial, collection_names="gradients")  # a list is required
    with pytest.raises(ValueError, match="tensor_regex' is not a valid regex"):
        ExplodingTensor(trial, tensor_regex="(")
    rule = ExplodingTensor(trial, collection_names=["gradients"], only_nan=True)
    assert (rule.collection_names, rule.tensor_regex, rule.only_nan) == (["gradients"], None, True)


def test_required_parameters_typed_defaults_and_duplicate_names(tmp_path: Path) -> None:
    @register_rule
    class NeedsThreshold(Rule):
        name = "TestNeedsThreshold"
        threshold: float
        names: list[str] = []  # mutable default: Rule copies it per instance

        def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
            return False

    try:
        trial = create_trial(tmp_path)
        with pytest.raises(ValueError, match="missing required parameter 'threshold'"):
            NeedsThreshold(trial)
        first = NeedsThreshold(trial, threshold=1)  # an int is a fine float
        first.names.append("x")
        assert NeedsThreshold(trial, threshold=0.5).names == []
        with pytest.raises(ValueError, match="must be float"):
            NeedsThreshold(trial, threshold=True)

        class Impostor(Rule):
            name: ClassVar[str] = "TestNeedsThreshold"

        with pytest.raises(ValueError, match="already taken"):
            register_rule(Impostor)
    finally:
        RULES.pop("TestNeedsThreshold", None)


# -- ExplodingTensor on hand-made arrays --------------------------------------------------


@pytest.fixture
def hand_made(tmp_path: Path) -> Path:
    new_store(tmp_path, {"gradients": ["gradient/w"], "losses": ["loss"]})
    finite = {"gradient/w": np.ones(4, np.float32), "loss": np.array(1.0), "n": np.arange(3)}
    write_step(tmp_path, 0, finite)
    write_step(tmp_path, 1, finite | {"loss": np.array(np.inf)})
    write_step(tmp_path, 2, finite | {"gradient/w": np.array([1, np.nan, -np.inf, np.nan])})
    return tmp_path


def test_nan_and_inf_both_count_by_default(hand_made: Path) -> None:
    trial = create_trial(hand_made)
    rule = ExplodingTensor(trial)  # no selection: every tensor
    assert run_rule(rule) == 1
    assert rule.finding is not None
    assert (rule.finding.step, rule.finding.tensor) == (1, "loss")
    assert "0 NaN and 1 inf" in rule.finding.message


def test_only_nan_ignores_inf(hand_made: Path) -> None:
    rule = ExplodingTensor(create_trial(hand_made), only_nan=True)
    assert run_rule(rule) == 2
    assert rule.finding is not None
    assert rule.finding.tensor == "gradient/w"
    assert "2 NaN" in rule.finding.message and "inf" not in rule.finding.message


def test_selection_by_collection_and_regex(hand_made: Path) -> None:
    trial = create_trial(hand_made)
    assert run_rule(ExplodingTensor(trial, collection_names=["gradients"])) == 2
    assert run_rule(ExplodingTensor(trial, tensor_regex=".*gradient")) == 2
    assert run_rule(ExplodingTensor(trial, tensor_regex="loss")) == 1
    assert run_rule(ExplodingTensor(trial, collection_names=["weights"])) is None
    rule = ExplodingTensor(trial, collection_names=["gradients"], tensor_regex="loss")
    assert run_rule(rule) == 1  # union of both selections


# -- ExplodingTensor on real training -----------------------------------------------------


def test_fires_on_a_real_explosion(tmp_path: Path) -> None:
    hook = every_step_hook(tmp_path)
    log = train(hook, steps=8, lr=EXPLODING_LR)
    hook.close()
    expected_step, expected_tensor = first_nonfinite(log)
    assert expected_step > 0  # it did start healthy

    rule = ExplodingTensor(create_trial(tmp_path), tensor_regex=".*gradient")
    assert run_rule(rule) == expected_step
    assert rule.finding is not None
    assert rule.finding.tensor == expected_tensor
    grad = log.grads[expected_step][expected_tensor.removeprefix("gradient/")]
    counts = f"{int(np.isnan(grad).sum())} NaN and {int(np.isinf(grad).sum())} inf"
    assert counts in rule.finding.message


def test_only_nan_on_a_real_explosion_of_the_loss(tmp_path: Path) -> None:
    hook = every_step_hook(tmp_path)
    log = train(hook, steps=8, lr=EXPLODING_LR)
    hook.close()
    first_nonfinite_loss = next(s for s, v in enumerate(log.losses) if not np.isfinite(v))
    first_nan_loss = next(s for s, v in enumerate(log.losses) if np.isnan(v))
    assert first_nonfinite_loss < first_nan_loss  # the loss overflows to inf before NaN

    trial = create_trial(tmp_path)
    assert run_rule(ExplodingTensor(trial, collection_names=["losses"])) == first_nonfinite_loss
    only_nan = ExplodingTensor(trial, collection_names=["losses"], only_nan=True)
    assert run_rule(only_nan) == first_nan_loss


def test_quiet_on_a_healthy_run(tmp_path: Path) -> None:
    hook = every_step_hook(tmp_path)
    log = train(hook, steps=30, eval_steps=3)
    hook.close()
    assert all(np.isfinite(loss) for loss in log.losses)
    trial = create_trial(tmp_path)
    rule = ExplodingTensor(trial)  # every tensor, every step, both modes
    assert run_rule(rule) is None
    assert run_rule(rule, ModeKeys.EVAL) is None
    assert rule.finding is None
    assert len(trial.steps()) == 30


def test_weight_update_ratio_skips_biases_saved_among_the_weights(tmp_path: Path) -> None:
    """An LSTM's bias_hh_l0 is saved among the weights; a bias starts near zero, so its
    ratio is large by construction: judged only with the managed defaults."""
    names = ["rnn.weight_hh_l0", "rnn.bias_hh_l0"]
    new_store(tmp_path, {"weights": names})
    weight = np.ones((4, 4), np.float32)
    write_step(tmp_path, 0, {names[0]: weight, names[1]: np.full(4, 0.01, np.float32)})
    write_step(tmp_path, 1, {names[0]: weight * 1.5, names[1]: np.full(4, 0.5, np.float32)})
    rule = RULES["WeightUpdateRatio"]
    assert run_rule(rule(create_trial(tmp_path))) is None
    legacy = rule(create_trial(tmp_path), **rule.LEGACY_DEFAULTS)
    assert run_rule(legacy) == 1
    assert legacy.finding is not None and legacy.finding.tensor == "rnn.bias_hh_l0"

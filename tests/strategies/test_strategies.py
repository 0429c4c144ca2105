"""Every strategy: its declarations, when it applies, and exactly what it changes."""

from __future__ import annotations

import pytest

from remedy.state_schema import RunSpec, State
from remedy.strategies import STRATEGIES, get_strategy

ISSUE_STRATEGIES = {  # the issue's list, by registry name
    "lower_warmup_lr", "lower_lr", "lower_lr_10x", "raise_lr", "add_batch_norm", "use_elu",
    "use_relu", "use_leaky_relu", "use_selu", "use_tanh", "change_init", "clip_gradients",
    "use_sgd", "use_momentum", "use_adam", "use_adamw", "add_weight_decay", "add_dropout",
    "raise_batch_size", "longer_warmup",
}  # fmt: skip
OURS = sorted(ISSUE_STRATEGIES)


def test_the_issue_strategies_are_registered() -> None:
    assert ISSUE_STRATEGIES <= set(STRATEGIES)


@pytest.mark.parametrize("name", OURS)
def test_declarations(name: str) -> None:
    cls = STRATEGIES[name]
    assert cls.name == name
    assert cls.explanation and len(cls.explanation) < 100
    assert cls.changes and set(cls.changes) <= set(RunSpec.model_fields)
    assert isinstance(cls.changes_architecture, bool)


@pytest.mark.parametrize("name", OURS)
def test_apply_changes_only_declared_fields_and_something(name: str) -> None:
    strategy = get_strategy(name)
    spec = RunSpec(activation="relu") if name == "use_elu" else RunSpec()
    if name == "use_momentum":
        spec = RunSpec(optimizer="sgd")
    assert strategy.applies(spec)
    after = strategy.apply(spec)
    before_d, after_d = spec.model_dump(), after.model_dump()
    changed = {k for k in after_d if before_d[k] != after_d[k]}
    assert changed and changed <= set(strategy.changes)
    assert strategy.reason(spec, after).startswith(strategy.explanation)


@pytest.mark.parametrize("name", OURS)
def test_repeated_application_reaches_a_bound(name: str) -> None:
    strategy = get_strategy(name)
    spec = RunSpec(activation="relu") if name == "use_elu" else RunSpec()
    for _ in range(50):
        if not strategy.applies(spec):
            break
        spec = strategy.apply(spec)
    assert not strategy.applies(spec)


def test_values_of_the_hyperparameter_strategies() -> None:
    spec = RunSpec()
    assert get_strategy("lower_lr_10x").apply(spec).learning_rate == pytest.approx(0.01)
    assert get_strategy("lower_lr_10x").apply(spec).warmup_learning_rate == pytest.approx(0.01)
    assert get_strategy("raise_lr").apply(RunSpec(learning_rate=0.01)).learning_rate == (
        pytest.approx(0.1)
    )
    assert not get_strategy("raise_lr").applies(RunSpec(learning_rate=0.2))
    clip = get_strategy("clip_gradients")
    assert clip.apply(spec).grad_clip_norm == 1.0
    assert clip.apply(clip.apply(spec)).grad_clip_norm == pytest.approx(0.1)
    assert get_strategy("add_weight_decay").apply(spec).weight_decay == pytest.approx(4e-4)
    assert get_strategy("add_weight_decay").apply(RunSpec(weight_decay=0)).weight_decay == 1e-4
    assert get_strategy("add_dropout").apply(spec).dropout == pytest.approx(0.2)
    assert get_strategy("raise_batch_size").apply(spec).batch_size == 256
    assert get_strategy("longer_warmup").apply(spec).warmup_epochs == 2
    assert not get_strategy("longer_warmup").applies(RunSpec(num_epochs=2))
    assert get_strategy("change_init").apply(spec).init == "lecun_normal"
    adam = get_strategy("use_adam").apply(spec)
    assert (adam.optimizer, adam.learning_rate, adam.warmup_learning_rate) == ("adam", 1e-3, 1e-3)
    selu = get_strategy("use_selu").apply(spec)
    assert (selu.activation, selu.init) == ("selu", "lecun_normal")


def test_which_strategies_keep_the_weights() -> None:
    keep = {name for name, cls in STRATEGIES.items() if cls.keeps_weights()}
    assert {"lower_lr_10x", "clip_gradients", "lower_warmup_lr", "add_dropout"} <= keep
    assert not {"add_batch_norm", "use_selu", "use_relu", "change_init"} & keep


def test_a_strategy_is_understood_only_if_all_its_hyperparameters_are() -> None:
    clip = STRATEGIES["clip_gradients"]
    assert clip.understood_by(RunSpec())  # None: the built-in entry point takes all
    assert clip.understood_by(RunSpec(hyperparameters_understood=["grad_clip_norm"]))
    assert not clip.understood_by(RunSpec(hyperparameters_understood=["learning_rate"]))
    lower = STRATEGIES["lower_lr_10x"]  # needs learning_rate; adjusts a warmup if it can
    assert lower.understood_by(RunSpec(hyperparameters_understood=["learning_rate"]))
    assert not lower.understood_by(RunSpec(hyperparameters_understood=["warmup_learning_rate"]))


def test_counters_only_for_the_seed_strategies() -> None:
    state = State()
    for name in OURS:
        state = get_strategy(name).bump_counter(state)
    h = state.history
    assert (h.num_warmup_adjustments, h.num_batch_layer_adjustments) == (1, 1)
    assert h.num_learning_rate_adjustments == 1


def test_lowest_warmup_lr_makes_the_seed_ladders_halvings_at_once() -> None:
    strategy = get_strategy("lowest_warmup_lr")
    after = strategy.apply(RunSpec(warmup_learning_rate=0.1, learning_rate=0.1))
    assert after.warmup_learning_rate == 0.003125 and after.learning_rate == 0.1
    assert not strategy.applies(after)  # at the ladder's floor
    assert not strategy.applies(RunSpec(warmup_epochs=0))  # no warmup rate in use

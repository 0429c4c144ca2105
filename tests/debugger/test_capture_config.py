"""A job's capture configuration is derived from its rules (issue 12)."""

from __future__ import annotations

from typing import Any

import pytest

from remedy.debugger.capture import capture_config
from remedy.debugger.config import HookConfig
from remedy.debugger.rule_check import check_rules
from remedy.debugger.rule_config import RuleConfig


def derived(*rules: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    configs = [RuleConfig(name=f"r{i}", rule=r, parameters=p) for i, (r, p) in enumerate(rules)]
    config = capture_config(check_rules(configs), "/store", 100)
    HookConfig.from_dict(config)  # the hook takes it
    return config["collections"]


def test_the_seed_rule_saves_what_the_original_saved() -> None:
    assert derived(("ExplodingTensor", {"tensor_regex": ".*gradient"})) == {
        "losses": {"save_interval": 1},
        "gradients": {"save_interval": 100},
    }


@pytest.mark.parametrize(
    ("rule", "params", "collection", "settings"),
    [
        ("DeadRelu", {}, "activations", {"save_outputs": True, "save_inputs": False}),
        ("PoorWeightInitialization", {}, "activations", {"save_inputs": True}),
        ("SaturatedActivation", {}, "activations", {"save_inputs": True}),
        ("Confusion", {}, "labels", {"save_interval": 1}),
        ("Confusion", {}, "predictions", {"save_interval": 1}),
        ("ClassImbalance", {}, "labels", {"save_interval": 1}),
        ("OscillatingLoss", {}, "metrics", {"save_interval": 1}),
        ("SlowConvergence", {}, "metrics", {"save_interval": 1}),
        ("CheckInputImages", {}, "inputs", {"save_interval": 100}),
        ("WeightUpdateRatio", {}, "weights", {"save_interval": 100}),
        ("UnchangedTensor", {"collection_names": ["biases"]}, "biases", {"save_interval": 100}),
        ("AllZero", {"tensor_regex": ".*relu_output"}, "activations", {"save_outputs": True}),
    ],
)
def test_each_rule_gets_what_it_reads(
    rule: str, params: dict[str, Any], collection: str, settings: dict[str, Any]
) -> None:
    collections = derived(("ExplodingTensor", {}), (rule, params))
    assert collections[collection].items() >= settings.items()


def test_activations_are_saved_at_the_first_steps_too() -> None:
    # PoorWeightInitialization judges the first 10 steps: interval 100 alone gives it one.
    activations = derived(("PoorWeightInitialization", {}))["activations"]
    assert activations["save_steps"] == list(range(10))


def test_a_rule_over_every_tensor_adds_nothing() -> None:
    assert set(derived(("ExplodingTensor", {}), ("TensorVariance", {"max_threshold": 1.0}))) == {
        "losses",
        "gradients",
    }


def test_the_rules_that_read_the_loss_are_known_by_their_class() -> None:
    """What a job of several optimizers cannot be judged by (decisions/observe.py)."""
    from remedy.debugger.rules import RULES, reads_the_loss

    loss_rules = {name for name in RULES if reads_the_loss(name)}
    for name in ("DivergingLoss", "LossNotDecreasing", "LossPlateau", "LossSpike", "TinyUpdates"):
        assert name in loss_rules, name
    for name in ("ExplodingTensor", "VanishingGradient", "GradientNormSpike", "DyingRelu"):
        assert name not in loss_rules, name
    assert not reads_the_loss("MyOwnRule")  # a custom rule's class: judged as it says

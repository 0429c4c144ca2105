"""Rule presets: a run that names no rules gets the recommended set, a preset is selected
by name in run_spec.rules (whole or one rule of it), and the preflight refuses what
cannot be expanded before anything launches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remedy.debugger import RULES
from remedy.debugger.capture import ZERO_CODE_KINDS, kinds_read
from remedy.debugger.rule_check import check_rule
from remedy.debugger.rule_config import RuleConfig, RuleConfigError, parse_rule_configs
from remedy.debugger.rule_presets import expand_presets, preset
from remedy.jobs.local.backend import rule_configs
from remedy.state_schema import RunSpec
from remedy.tasks.preflight import PreflightError, check_rules
from remedy.training.demo import DEMO_RUN_SPEC


def test_a_run_that_names_no_rules_runs_the_recommended_preset() -> None:
    written = rule_configs(RunSpec())
    assert written == [config | {"actions": ["StopTraining"]} for config in preset("recommended")]
    rules = [check_rule(RuleConfig.from_dict(config)) for config in written]
    # losses and gradients only: what every job saves, a script's zero-code capture too
    assert kinds_read(rules) <= ZERO_CODE_KINDS


def test_the_demo_names_its_rule_and_keeps_the_seed_s_only_rule() -> None:
    assert [(rule.name, rule.rule) for rule in DEMO_RUN_SPEC.rules] == [
        ("ExplodingTensor", "ExplodingTensor")
    ]


def test_managed_preset_is_the_service_s_documented_defaults() -> None:
    configs = {config["rule"]: config["parameters"] for config in preset("managed")}
    assert configs["Overfit"] == RULES["Overfit"].LEGACY_DEFAULTS
    assert configs["LossNotDecreasing"]["num_steps"] == 10
    spec = RunSpec.model_validate(
        {"rules": [{"name": "lnd", "rule": "LossNotDecreasing", "preset": "managed",
                    "parameters": {"patience": 2}}]}
    )  # fmt: skip
    (written,) = rule_configs(spec)
    assert written["parameters"] == RULES["LossNotDecreasing"].LEGACY_DEFAULTS | {"patience": 2}


def test_a_whole_preset_beside_own_rules_in_rules_json() -> None:
    configs = parse_rule_configs(
        [{"preset": "recommended", "actions": ["Notify"]}, {"name": "Mine", "rule": "Overfit"}]
    )
    assert [c.name for c in configs][-1] == "Mine"
    assert {c.actions for c in configs[:-1]} == {("Notify",)}


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ([{"preset": "recomended"}], "did you mean 'recommended'"),
        ([{"name": "x", "rule": "Overfit", "preset": "recommended"}], "has no rule 'Overfit'"),
        ([{"preset": "recommended"}, {"name": "LossSpike", "rule": "LossSpike"}], "used twice"),
        (
            [{"name": "d", "rule": "DivergingLoss", "preset": "recommended",
              "parameters": {"factr": 3}}],
            "did you mean 'factor'",
        ),
    ],
)  # fmt: skip
def test_preflight_refuses_what_a_preset_cannot_give(rules: list, expected: str) -> None:
    with pytest.raises(PreflightError, match=expected):
        check_rules(RunSpec.model_validate({"rules": rules}))


def test_a_preset_alone_takes_no_parameters() -> None:
    with pytest.raises(ValueError, match="alone takes only actions"):
        RunSpec.model_validate({"rules": [{"preset": "recommended", "parameters": {"a": 1}}]})
    with pytest.raises(RuleConfigError, match="unknown rule preset"):
        parse_rule_configs([{"preset": "nope"}])
    assert expand_presets([{"name": "a", "rule": "Overfit"}]) == [{"name": "a", "rule": "Overfit"}]


def test_a_warm_started_job_s_diverging_loss_does_not_take_its_first_loss_for_untrained() -> None:
    # Its store begins with a trained model: 1.1x that loss is no "worse than untrained".
    scratch = {c["rule"]: c["parameters"] for c in rule_configs(RunSpec())}
    warm = {c["rule"]: c["parameters"] for c in rule_configs(RunSpec(init_checkpoint="/c"))}
    assert "initial_factor" not in scratch["DivergingLoss"]  # the rule's default, 1.1
    assert warm["DivergingLoss"] == scratch["DivergingLoss"] | {
        "initial_factor": None,
        "rebound_share": None,  # the fall from its first loss is a trained model's: none
    }
    assert {r: p for r, p in warm.items() if r != "DivergingLoss"} == {
        r: p for r, p in scratch.items() if r != "DivergingLoss"
    }


def test_the_recommended_diverging_loss_judges_training_losses_only(tmp_path: Path) -> None:
    """An evaluation's loss that climbs while training's falls (batch norm's running
    statistics, overfitting) is no divergence: the chance case with batch norm was stopped
    on its evaluations' loss, 5.3 against its first 2.5, its training loss at 0.28. The
    same losses stop the rule with its own default (each mode)."""
    from remedy.debugger import ModeKeys, create_trial
    from tests.debugger.helpers import new_store, write_step

    new_store(tmp_path, {"losses": ["loss"]})
    for step in range(40):
        loss = np.array(2.3 * 0.95**step, dtype=np.float32)
        write_step(tmp_path, step, {"loss": loss}, ModeKeys.TRAIN, global_step=2 * step)
        evaluation = np.array(2.5 if step < 2 else 5.3, dtype=np.float32)
        write_step(tmp_path, step, {"loss": evaluation}, ModeKeys.EVAL, global_step=2 * step + 1)
    (config,) = [c for c in preset("recommended") if c["rule"] == "DivergingLoss"]

    def fires(parameters: dict[str, Any]) -> bool:
        rule = RULES["DivergingLoss"](create_trial(tmp_path), **parameters)
        trial = rule.trial
        return any(
            rule.invoke_at_step(step, mode)
            for mode in (ModeKeys.TRAIN, ModeKeys.EVAL)
            for step in trial.steps(mode)
        )

    assert not fires(config["parameters"])
    assert fires({})  # each mode: the evaluations' climb fires

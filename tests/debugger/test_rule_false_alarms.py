"""No built-in rule cries wolf: tiny but healthy runs of the built-in job (ELU and ReLU,
with and without batch norm; benchmarks/rule_false_alarms.py, which prints the table),
with every collection the rules read saved, and every registered rule that runs with its
defaults evaluated over them. None may report IssuesFound. (Each rule still fires on its
pathology: test_rule_pathologies.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from remedy.debugger import RuleStatus
from remedy.debugger.rules.registry import rules_with_defaults
from tests.debugger.helpers import load_benchmark

BENCHMARK = load_benchmark("rule_false_alarms")


@pytest.mark.slow
@pytest.mark.parametrize("config", [c for c in BENCHMARK.HEALTHY if c not in BENCHMARK.UNTUNED])
def test_no_rule_fires_on_a_healthy_run(config: str, tmp_path: Path) -> None:
    trained = BENCHMARK.train(config, BENCHMARK.HEALTHY[config], tmp_path / config)
    assert trained.test_accuracy is not None
    assert trained.test_accuracy >= BENCHMARK.MIN_ACCURACY, "not a healthy run: retune it"
    statuses = BENCHMARK.evaluate(trained.store, rules_with_defaults())
    fired = {
        rule: details
        for rule, (status, details) in statuses.items()
        if status is RuleStatus.ISSUES_FOUND
    }
    assert fired == {}
    # Error is a rule that read nothing: only the activation rules on a network without
    # their activation (DeadRelu on ELU, SaturatedActivation without tanh/sigmoid).
    errors = {rule for rule, (status, _) in statuses.items() if status is RuleStatus.ERROR}
    assert errors <= {"DeadRelu", "SaturatedActivation"}


def test_the_zoo_covers_both_activations_with_and_without_batch_norm() -> None:
    judged = [c for name, c in BENCHMARK.HEALTHY.items() if name not in BENCHMARK.UNTUNED]
    seen = {(c["activation"], c["add_batch_norm"]) for c in judged}
    assert seen == {("elu", 0), ("elu", 1), ("relu", 1)}  # ReLU without batch norm: UNTUNED

"""The recommended rules on two members of the zoo of benchmarks/rule_quality.py (which
prints the full table): quiet on a healthy run, and catching dead ReLUs (Adam at 100x its
usual rate) within DETECT_WITHIN save intervals of the start, as DeadRelu sees them in
the activations."""

from __future__ import annotations

from pathlib import Path

import pytest

from remedy.debugger import RuleStatus
from tests.debugger.helpers import load_benchmark

BENCHMARK = load_benchmark("rule_quality")
MEMBERS = {member.name: member for member in BENCHMARK.ZOO}


@pytest.mark.slow
def test_the_recommended_rules_stay_quiet_on_a_healthy_run(tmp_path: Path) -> None:
    trained = BENCHMARK.train(MEMBERS["mlp_elu_adam"], tmp_path / "healthy")
    found = BENCHMARK.evaluate(trained)
    assert trained.test_accuracy[-1] > 0.8, "not a healthy run: retune it"
    assert found[BENCHMARK.RECOMMENDED].status is RuleStatus.NO_ISSUES_FOUND


@pytest.mark.slow
def test_the_recommended_rules_catch_dead_relus_in_time(tmp_path: Path) -> None:
    trained = BENCHMARK.train(MEMBERS["dead_relu"], tmp_path / "dead_relu")
    found = BENCHMARK.evaluate(trained)
    limit = BENCHMARK.DETECT_WITHIN * BENCHMARK.SAVE_INTERVAL
    assert found["DeadRelu"].status is RuleStatus.ISSUES_FOUND  # the units really die
    assert found["DeadRelu"].train_step is not None and found["DeadRelu"].train_step <= limit
    recommended = found[BENCHMARK.RECOMMENDED]
    assert recommended.status is RuleStatus.ISSUES_FOUND
    assert recommended.train_step is not None and recommended.train_step <= limit


@pytest.mark.slow
def test_the_recommended_rules_catch_a_loss_climbing_back_from_a_high_start(
    tmp_path: Path,
) -> None:
    """A first loss well above ln 10, a fall to 1.6, and Adam at 0.1 driving it back to 2.28
    (chance), finite, below its first loss and below 10x its best: DivergingLoss's rebound
    test fires (a GPT-style LM at 1000x its rate did this: 3.2 -> 5.7)."""
    trained = BENCHMARK.train(MEMBERS["rebound_from_high_start"], tmp_path / "rebound")
    first, lowest, last = trained.losses[0], min(trained.losses), trained.losses[-1]
    assert first > 3.0 and lowest < 1.8 and 2.0 < last < first  # finite, back up, below start
    found = BENCHMARK.evaluate(trained)
    assert found["DivergingLoss"].status is RuleStatus.ISSUES_FOUND
    assert "of the way back up to the first window's" in found["DivergingLoss"].details
    assert found[BENCHMARK.RECOMMENDED].status is RuleStatus.ISSUES_FOUND

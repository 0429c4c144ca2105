"""A rule that has read nothing is Error, saying what it waited for (issue 12): never
NoIssuesFound for having seen nothing. Stores of real training (tests/debugger/scenarios)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from remedy.debugger import RuleStatus, create_trial, store
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.rule_config import RuleConfig
from tests.debugger import helpers
from tests.debugger import scenarios as sc


def evaluator(path: Path, tmp_path: Path, *rules: str, **kwargs: int) -> RuleEvaluator:
    configs = [RuleConfig(name=rule, rule=rule) for rule in rules]
    found = RuleEvaluator(
        create_trial(path), configs, tmp_path / "status", log=lambda line: None, **kwargs
    )
    found.start()
    return found


def test_at_the_end_a_rule_that_read_nothing_is_error(tmp_path: Path) -> None:
    # A classifier whose job saved losses and gradients only (zero-code capture's share).
    path = tmp_path / "store"
    sc.fit(
        path, sc.mlp([4, 8, 2]), sc.blobs(64), steps=6, lr=0.1, classify=True,
        collections=("losses", "gradients"),
    )  # fmt: skip
    rules = ("DeadRelu", "Confusion", "SaturatedActivation", "ExplodingTensor", "StalledTraining")
    found = evaluator(path, tmp_path, *rules)
    assert found.poll()
    statuses = found.statuses
    assert statuses["DeadRelu"].status is RuleStatus.ERROR
    assert statuses["DeadRelu"].details.startswith(
        "read nothing in 6 steps: it waits for activations (collection 'activations')"
    )
    assert "zero-code capture saves only losses, gradients" in statuses["DeadRelu"].details
    assert "labels (collection 'labels'), predictions" in statuses["Confusion"].details
    assert statuses["SaturatedActivation"].status is RuleStatus.ERROR
    assert "activation_inputs (collection 'activations' with save_inputs)" in (
        statuses["SaturatedActivation"].details
    )
    # It read the losses and gradients; StalledTraining reads step times, not tensors.
    assert statuses["ExplodingTensor"].status is RuleStatus.NO_ISSUES_FOUND
    assert statuses["StalledTraining"].status is RuleStatus.NO_ISSUES_FOUND


def test_while_the_job_runs_after_unread_steps_saved_steps(tmp_path: Path) -> None:
    path = helpers.new_store(tmp_path / "store", {"losses": ["loss"]})
    for step in range(3):
        helpers.write_step(path, step, {"loss": np.array(1.0 / (step + 1), dtype=np.float32)})
    found = evaluator(path, tmp_path, "DeadRelu", "Overtraining", unread_steps=4)
    assert not found.poll()
    assert found.statuses["DeadRelu"].status is RuleStatus.IN_PROGRESS  # 3 < 4 steps
    helpers.write_step(path, 3, {"loss": np.array(0.2, dtype=np.float32)})
    assert not found.poll()  # Overtraining reads the losses: still in progress
    assert found.statuses["DeadRelu"].status is RuleStatus.ERROR
    assert found.statuses["DeadRelu"].details.startswith("read nothing in 4 steps")
    assert found.statuses["Overtraining"].status is RuleStatus.IN_PROGRESS
    store.write_json(path / store.END_FILE, {"last_step": {"TRAIN": 3}})
    assert found.poll()
    assert found.statuses["Overtraining"].status is RuleStatus.NO_ISSUES_FOUND


def test_a_job_that_saved_no_step_leaves_no_rule_clean(tmp_path: Path) -> None:
    path = helpers.new_store(tmp_path / "store")
    store.write_json(path / store.END_FILE, {"last_step": {}})
    found = evaluator(path, tmp_path, "ExplodingTensor")
    assert found.poll()
    assert found.statuses["ExplodingTensor"].status is RuleStatus.ERROR
    assert "read nothing in 0 steps: it waits for any tensor" in (
        found.statuses["ExplodingTensor"].details
    )


def test_the_recommended_rules_on_a_job_that_saved_no_loss(tmp_path: Path) -> None:
    # A script whose loss the capture never saw (an explicit Hook without register_loss):
    # the default rules' loss rules read nothing, so the run is not called clean.
    from remedy.debugger.rule_presets import preset

    path = tmp_path / "store"
    sc.fit(
        path, sc.mlp([4, 8, 2]), sc.blobs(64), steps=6, lr=0.1, classify=True,
        collections=("gradients", "weights"),
    )  # fmt: skip
    configs = [RuleConfig.from_dict(entry) for entry in preset("recommended")]
    found = RuleEvaluator(create_trial(path), configs, tmp_path / "status", log=lambda _: None)
    found.start()
    assert found.poll()
    errors = {n for n, r in found.statuses.items() if r.status is RuleStatus.ERROR}
    assert errors == {"DivergingLoss", "LossSpike", "LossPlateau", "TinyUpdates"}
    assert "it waits for losses (collection 'losses')" in found.statuses["LossSpike"].details
    # The gradient rules read what they need.
    assert found.statuses["ExplodingTensor"].status is RuleStatus.NO_ISSUES_FOUND

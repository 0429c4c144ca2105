"""The built-in job saves what its rules read (issue 12): the backend derives the capture
configuration from run_spec.rules, and a real `python -m remedy.training.train` process
saves activations, labels, predictions and the epoch's test accuracy for the rules that
read them, which then read something (none reports Error for having seen nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from remedy.debugger import RuleStatus, create_trial
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.rule_config import RuleConfig
from remedy.jobs.local.backend import debugger_config
from remedy.state_schema import RunSpec
from tests.helpers.builtin_job import TINY, run_job

RULES = [
    "DeadRelu",
    "PoorWeightInitialization",
    "Confusion",
    "ClassImbalance",
    "OscillatingLoss",
    "SlowConvergence",
    "CheckInputImages",
]


def test_the_built_in_job_saves_what_its_rules_read(tmp_path: Path) -> None:
    spec = RunSpec(rules=[{"name": rule, "rule": rule} for rule in RULES], debugger_save_interval=2)
    store = tmp_path / "tensors"
    config = tmp_path / "debugger.json"
    config.write_text(json.dumps(debugger_config(spec, store)))
    done = run_job(tmp_path, TINY | {"activation": "relu"}, REMEDY_DEBUGGER_CONFIG=str(config))
    assert done.returncode == 0, done.stderr

    trial = create_trial(store)
    for mode in ("TRAIN", "EVAL"):  # every batch, training and test
        assert {"labels", "predictions"} <= set(trial.tensor_names(mode=mode))
    accuracy = trial.tensor("accuracy")
    assert accuracy.steps("TRAIN") == []  # once per epoch: the test accuracy
    assert len(accuracy.steps("EVAL")) == 2
    relu = trial.tensor_names(regex=".*relu_output")
    assert relu and trial.tensor_names(regex=".*relu_input")
    assert trial.tensor(relu[0]).steps("TRAIN") == [0, 1, 2, 3, 4, 5]  # the first 10 steps
    assert trial.tensor_names(collection="inputs", mode="TRAIN", step=0) == ["input"]

    configs = [RuleConfig(name=rule, rule=rule) for rule in RULES]
    evaluator = RuleEvaluator(trial, configs, tmp_path / "status", log=lambda line: None)
    evaluator.start()
    assert evaluator.poll()
    for name, record in evaluator.statuses.items():
        assert record.status is not RuleStatus.ERROR, (name, record.details)


def test_nothing_more_is_saved_when_no_rule_reads_it(tmp_path: Path) -> None:
    store = tmp_path / "tensors"
    config = tmp_path / "debugger.json"
    config.write_text(json.dumps(debugger_config(RunSpec(debugger_save_interval=2), store)))
    done = run_job(tmp_path, TINY, REMEDY_DEBUGGER_CONFIG=str(config))
    assert done.returncode == 0, done.stderr
    names = set(create_trial(store).tensor_names())
    assert "loss" in names
    assert not names & {"labels", "predictions", "accuracy", "input"}

"""Custom rules loaded from a file, the Notify action, and a raising rule among others."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from remedy.debugger import RULES, RuleStatus, create_trial, read_statuses
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.rule_config import RuleConfig, RuleConfigError, parse_rule_configs
from remedy.debugger.rules import load_rule_file
from tests.debugger import scenarios as sc
from tests.debugger.helpers import start_evaluator

CUSTOM = '''
from remedy.debugger import ModeKeys, Rule


class LossAbove(Rule):
    """Fires when the loss is above `limit` after `warmup` steps."""

    name = "LossAbove"
    limit: float
    warmup: int = 0

    def invoke_at_step(self, step, mode=ModeKeys.TRAIN):
        found = self.loss_at(step, mode)
        if found is None or step < self.warmup:
            return False
        name, loss = found
        if loss > self.limit:
            return self.fire(step, mode, name, f"loss {loss:.3g} > {self.limit:g}")
        return False


class Broken(Rule):
    name = "Broken"

    def invoke_at_step(self, step, mode=ModeKeys.TRAIN):
        raise RuntimeError("custom rule bug")
'''


def write_rule_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_rules.py"
    path.write_text(textwrap.dedent(CUSTOM))
    return path


def stalled_store(tmp_path: Path) -> sc.Run:
    # lr 0: the loss stays at its first value, far above 0.01
    return sc.fit(tmp_path / "store", sc.mlp([4, 8, 1]), sc.regression(32), steps=6, lr=0.0)


def test_a_custom_rule_file_is_evaluated_like_a_built_in(tmp_path: Path) -> None:
    rule_file = write_rule_file(tmp_path)
    run = stalled_store(tmp_path)
    rules = [
        {
            "name": "HighLoss",
            "rule": "LossAbove",
            "rule_file": str(rule_file),
            "parameters": {"limit": 0.01, "warmup": 2},
            "actions": ["Notify"],
        },
        {"name": "Buggy", "rule": "Broken", "rule_file": str(rule_file)},
        {"name": "Unchanged", "rule": "UnchangedTensor", "parameters": {"num_steps": 4}},
    ]
    proc, status_dir = start_evaluator(run.store, rules, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    statuses = read_statuses(status_dir)
    assert statuses["HighLoss"].status is RuleStatus.ISSUES_FOUND
    assert (statuses["HighLoss"].step, statuses["HighLoss"].tensor) == (2, "loss")
    assert f"loss {run.losses[2]:.3g} > 0.01" == statuses["HighLoss"].details
    assert statuses["Buggy"].status is RuleStatus.ERROR
    assert "RuntimeError: custom rule bug" in statuses["Buggy"].details
    assert statuses["Unchanged"].status is RuleStatus.ISSUES_FOUND  # the others kept going
    assert "LossAbove" not in RULES  # custom rules do not leak into the registry

    # Notify: one JSON line per finding, for the orchestrator to send on
    lines = (status_dir / "notifications.jsonl").read_text().splitlines()
    assert [json.loads(line)["rule"] for line in lines] == ["HighLoss"]
    assert json.loads(lines[0])["step"] == 2
    assert "HighLoss: Notify" in out


def test_custom_rule_parameters_are_validated(tmp_path: Path) -> None:
    rule_file = write_rule_file(tmp_path)
    cls = load_rule_file(rule_file, "LossAbove")
    assert cls.defaults() == {"warmup": 0}
    trial = create_trial(tmp_path / "none")
    configs = parse_rule_configs(
        [
            {"name": "A", "rule": "LossAbove", "rule_file": str(rule_file)},  # no limit
            {"name": "B", "rule": "Nope", "rule_file": str(rule_file)},
            {"name": "C", "rule": "LossAbove", "rule_file": str(tmp_path / "missing.py")},
        ]
    )
    try:
        RuleEvaluator(trial, configs, tmp_path / "status")
    except RuleConfigError as exc:
        assert "missing required parameter 'limit'" in exc.problems["A"]
        assert "no Rule subclass 'Nope'" in exc.problems["B"]
        assert "does not exist" in exc.problems["C"]
    else:
        raise AssertionError("invalid custom rules were accepted")


def test_notify_callback_and_stop_file_together(tmp_path: Path) -> None:
    run = stalled_store(tmp_path)
    sent: list[dict] = []
    config = RuleConfig(
        name="Stuck",
        rule="LossNotDecreasing",
        parameters={"num_steps": 2, "patience": 1},
        actions=("StopTraining", "Notify"),
    )
    evaluator = RuleEvaluator(
        create_trial(run.store),
        [config],
        tmp_path / "status",
        stop_file=tmp_path / "stop.json",
        log=lambda line: None,
        notify=sent.append,
    )
    evaluator.start()
    evaluator.poll()
    assert evaluator.statuses["Stuck"].status is RuleStatus.ISSUES_FOUND
    assert [n["rule"] for n in sent] == ["Stuck"] and sent[0]["step"] == 3
    assert json.loads((tmp_path / "stop.json").read_text())["rule"] == "Stuck"

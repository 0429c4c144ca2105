import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import ModeKeys, Rule, RuleStatus, create_trial, read_statuses, register_rule
from remedy.debugger.evaluator import (
    BUSY_GRACE_S,
    BUSY_POLL_INTERVAL,
    RuleEvaluator,
    evaluator_command,
)
from remedy.debugger.rule_config import RuleConfig
from remedy.debugger.rules import RULES
from tests.debugger.helpers import (
    EXPLODING_LR,
    every_step_hook,
    first_nonfinite,
    new_store,
    read_status,
    start_evaluator,
    train,
    wait_for,
    write_step,
)

STATUS_KEYS = {
    "RuleConfigurationName",
    "RuleEvaluationStatus",
    "StatusDetails",
    "LastModifiedTime",
    "step",
    "mode",
    "tensor",
    "steps_evaluated",
    "rule",  # the rule's class: what the policy repairs by (the name is the user's)
}

GRADIENTS_EXPLODE = {
    "name": "GradientsExplode",
    "rule": "ExplodingTensor",
    "parameters": {"tensor_regex": ".*gradient"},
    "actions": ["StopTraining", "Notify"],
}


def test_issues_found_stops_a_running_job(tmp_path: Path) -> None:
    store_dir, stop_file = tmp_path / "store", tmp_path / "stop.json"
    proc, status_dir = start_evaluator(store_dir, [GRADIENTS_EXPLODE], tmp_path, stop_file)
    try:
        wait_for(lambda: read_status(status_dir, "GradientsExplode") is not None)
        assert read_status(status_dir, "GradientsExplode")["RuleEvaluationStatus"] == "InProgress"

        # The job obeys the stop file, as a job launched by the local backend would.
        hook = every_step_hook(store_dir)
        log = train(hook, steps=0, lr=EXPLODING_LR, stop_file=stop_file, max_seconds=120)
        hook.close()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert log.stopped_by_file

    expected_step, expected_tensor = first_nonfinite(log)
    status = read_status(status_dir, "GradientsExplode")
    assert set(status) == STATUS_KEYS
    assert status["RuleEvaluationStatus"] == "IssuesFound"
    assert (status["step"], status["mode"], status["tensor"]) == (
        expected_step,
        "TRAIN",
        expected_tensor,
    )
    assert status["steps_evaluated"] == expected_step + 1  # fired at the first bad step
    assert expected_tensor in status["StatusDetails"]
    assert status["LastModifiedTime"].endswith("Z")

    stop = json.loads(stop_file.read_text())
    assert (stop["rule"], stop["step"], stop["mode"], stop["tensor"]) == (
        "GradientsExplode",
        expected_step,
        "TRAIN",
        expected_tensor,
    )
    assert "GradientsExplode: InProgress -> IssuesFound" in out


def test_every_rule_fires_on_a_finished_exploding_store(tmp_path: Path) -> None:
    store_dir, stop_file = tmp_path / "store", tmp_path / "stop.json"
    hook = every_step_hook(store_dir)
    log = train(hook, steps=6, lr=EXPLODING_LR)
    hook.close()
    loss_nan = {
        "name": "LossNaN",
        "rule": "ExplodingTensor",
        "parameters": {"collection_names": ["losses"], "only_nan": True},
        "actions": ["StopTraining"],
    }
    proc, status_dir = start_evaluator(
        store_dir, [GRADIENTS_EXPLODE, loss_nan], tmp_path, stop_file
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err

    gradient_step, _ = first_nonfinite(log)
    nan_step = next(s for s, v in enumerate(log.losses) if v != v)
    statuses = read_statuses(status_dir)
    assert statuses["GradientsExplode"].status is RuleStatus.ISSUES_FOUND
    assert statuses["GradientsExplode"].step == gradient_step
    assert statuses["LossNaN"].status is RuleStatus.ISSUES_FOUND
    assert (statuses["LossNaN"].step, statuses["LossNaN"].tensor) == (nan_step, "loss")
    # the first rule to fire owns the stop file
    assert json.loads(stop_file.read_text())["rule"] == "GradientsExplode"


def test_no_issues_found_once_a_healthy_job_ends(tmp_path: Path) -> None:
    store_dir, stop_file = tmp_path / "store", tmp_path / "stop.json"
    proc, status_dir = start_evaluator(store_dir, [GRADIENTS_EXPLODE], tmp_path, stop_file)
    try:
        wait_for(lambda: read_status(status_dir, "GradientsExplode") is not None)
        hook = every_step_hook(store_dir)
        train(hook, steps=20, eval_steps=2)
        hook.close()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    status = read_status(status_dir, "GradientsExplode")
    assert status["RuleEvaluationStatus"] == "NoIssuesFound"
    assert status["steps_evaluated"] == 22  # every TRAIN and EVAL step, once
    assert (status["step"], status["tensor"]) == (None, None)
    assert not stop_file.exists()
    assert "InProgress -> NoIssuesFound" in out


def test_sigterm_evaluates_what_is_written_then_stops(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    hook = every_step_hook(store_dir)
    train(hook, steps=5)
    hook.flush()  # on disk, but the job has not ended
    # A long poll interval: the steps below are only seen if SIGTERM evaluates them.
    proc, status_dir = start_evaluator(store_dir, [GRADIENTS_EXPLODE], tmp_path, poll_interval=300)
    try:
        wait_for(lambda: read_status(status_dir, "GradientsExplode") is not None)
        train(hook, steps=4, seed=1)
        hook.flush()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        hook.close()
    assert proc.returncode == 0, err
    status = read_status(status_dir, "GradientsExplode")
    assert status["RuleEvaluationStatus"] == "Stopped"
    assert status["steps_evaluated"] == 9
    assert "InProgress -> Stopped" in out


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (
            [
                {"name": "A", "rule": "NoSuchRule"},
                {"name": "B", "rule": "ExplodingTensor", "parameters": {"bogus": 1}},
                {"name": "C", "rule": "ExplodingTensor", "parameters": {"only_nan": "no"}},
                {"name": "D", "rule": "ExplodingTensor"},
            ],
            {
                "A": "unknown rule 'NoSuchRule'",
                "B": "unknown parameter 'bogus'",
                "C": "parameter 'only_nan' must be bool",
                "D": "not started",
            },
        ),
        (
            [
                {"name": "E", "rule": "ExplodingTensor", "actions": ["Email"]},
                {"name": "F", "rule": "ExplodingTensor"},
            ],
            {"E": "actions: must be a list drawn from", "F": "not started"},
        ),
    ],
)
def test_invalid_rules_file_writes_errors_and_exits_non_zero(
    tmp_path: Path, rules: list[dict], expected: dict[str, str]
) -> None:
    proc, status_dir = start_evaluator(tmp_path / "store", rules, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    statuses = read_statuses(status_dir)
    assert set(statuses) == set(expected)
    for name, fragment in expected.items():
        assert statuses[name].status is RuleStatus.ERROR
        assert fragment in statuses[name].details, statuses[name].details
    assert "invalid rules" in err


def test_a_step_listed_after_a_later_step_of_another_mode_is_still_evaluated(
    tmp_path: Path,
) -> None:
    new_store(tmp_path / "store")
    write_step(tmp_path / "store", 0, {"loss": np.array(1.0)}, global_step=0)
    # EVAL step at global 2 listed before TRAIN step 1 at global 1: a listing race.
    write_step(tmp_path / "store", 0, {"loss": np.array(1.0)}, ModeKeys.EVAL, global_step=2)
    evaluator = RuleEvaluator(
        create_trial(tmp_path / "store"),
        [RuleConfig("Explode", "ExplodingTensor")],
        tmp_path / "status",
        log=lambda line: None,
    )
    evaluator.start()
    evaluator.poll()
    assert evaluator.statuses["Explode"].steps_evaluated == 2
    write_step(tmp_path / "store", 1, {"loss": np.array(np.nan)}, global_step=1)
    evaluator.poll()
    record = evaluator.statuses["Explode"]
    assert (record.status, record.step, record.mode) == (RuleStatus.ISSUES_FOUND, 1, ModeKeys.TRAIN)


def test_it_polls_often_until_the_first_step_and_while_steps_arrive(tmp_path: Path) -> None:
    """A fast job (steps of a few ms) on a local store is stopped within a few steps of a
    finding: with a busy interval (the local backend's), until the first step and within
    BUSY_GRACE_S of a poll that found steps the next poll comes after it (steps come in
    batches: a poll between two finds none); after that, after the interval. Without one
    (an S3 store: every poll costs requests), always the interval."""
    new_store(tmp_path / "store")
    evaluator = RuleEvaluator(
        create_trial(tmp_path / "store"),
        [RuleConfig("Explode", "ExplodingTensor")],
        tmp_path / "status",
        log=lambda line: None,
    )
    busy = BUSY_POLL_INTERVAL
    evaluator.start()
    evaluator.poll()
    assert evaluator.next_wait(0.5, busy) == busy  # the job's first steps are coming
    assert evaluator.next_wait(2.0) == 2.0  # no busy interval asked for
    write_step(tmp_path / "store", 0, {"loss": np.array(1.0)}, global_step=0)
    evaluator.poll()
    assert evaluator.next_wait(0.5, busy) == busy < 0.5
    assert evaluator.next_wait(0.01, busy) == 0.01  # never slower than asked
    assert evaluator.next_wait(2.0) == 2.0
    evaluator.poll()  # no new step, just after one that found some: a gap between batches
    assert evaluator.next_wait(0.5, busy) == busy
    time.sleep(BUSY_GRACE_S)
    evaluator.poll()  # still none: a pause
    assert evaluator.next_wait(0.5, busy) == 0.5

    # the local backend asks for it; the command carries it only when asked
    local = evaluator_command("t", "r.json", "s", "stop", 0.5, BUSY_POLL_INTERVAL)
    assert local[local.index("--busy-poll-interval") + 1] == str(BUSY_POLL_INTERVAL)
    assert "--busy-poll-interval" not in evaluator_command("s3://b/t", "r.json", "s", "stop", 2.0)


def test_a_store_of_another_format_is_an_error(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    (store_dir / "meta.json").write_text('{"format": "smdebug", "version": 1}')
    proc, status_dir = start_evaluator(store_dir, [GRADIENTS_EXPLODE], tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    status = read_status(status_dir, "GradientsExplode")
    assert status["RuleEvaluationStatus"] == "Error"
    assert "cannot read the store" in status["StatusDetails"]


def test_a_rule_that_raises_gets_error_while_the_others_run(tmp_path: Path) -> None:
    @register_rule
    class Broken(Rule):
        name = "TestBroken"

        def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
            if step == 2:
                raise RuntimeError("boom")
            return False

    try:
        store_dir = tmp_path / "store"
        hook = every_step_hook(store_dir)
        train(hook, steps=5)
        hook.flush()
        lines: list[str] = []
        evaluator = RuleEvaluator(
            create_trial(store_dir),
            [
                RuleConfig("Broken", "TestBroken"),
                RuleConfig("Explode", "ExplodingTensor", {"tensor_regex": ".*gradient"}),
            ],
            tmp_path / "status",
            log=lines.append,
        )
        evaluator.start()
        assert evaluator.poll() is False
        statuses = read_statuses(tmp_path / "status")
        assert statuses["Broken"].status is RuleStatus.ERROR
        assert "RuntimeError: boom" in statuses["Broken"].details
        assert (statuses["Broken"].step, statuses["Broken"].steps_evaluated) == (2, 2)
        assert statuses["Explode"].status is RuleStatus.IN_PROGRESS
        assert statuses["Explode"].steps_evaluated == 5

        train(hook, steps=3, seed=1)
        hook.close()
        assert evaluator.poll() is True
        statuses = read_statuses(tmp_path / "status")
        assert statuses["Explode"].status is RuleStatus.NO_ISSUES_FOUND
        assert statuses["Explode"].steps_evaluated == 8
        assert statuses["Broken"].steps_evaluated == 2  # final: never invoked again
        changes = [line.split(" ", 1)[1] for line in lines]
        assert changes == [
            "Broken: InProgress: Waiting for steps",
            "Explode: InProgress: Waiting for steps",
            "Broken: InProgress -> Error: RuntimeError: boom (at TRAIN step 2)",
            "Explode: InProgress -> NoIssuesFound: No issues found in 8 steps",
        ]
    finally:
        RULES.pop("TestBroken", None)

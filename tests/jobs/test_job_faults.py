"""Fault injection on a local job's real processes: every way a process of a job dies or
freezes ends in a final status with a reason naming it, within bounded time, and no
finished work is redone. (These tests kill and stop processes on purpose.)"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from remedy.jobs.local import LocalBackend
from remedy.state_schema import JobStatus, RuleSpec
from tests.helpers.local_jobs import spec, wait_final

WATCHED = [RuleSpec(name="Loss", rule="LossNotDecreasing")]


def status_of(backend: LocalBackend, job: str) -> dict:
    path = backend.paths(job).status
    return json.loads(path.read_text()) if path.exists() else {}


def wait_training(backend: LocalBackend, job: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = status_of(backend, job)
        if status.get("training_pid") and backend.paths(job).progress.exists():
            return status
        time.sleep(0.1)
    raise AssertionError(f"{job} never started training: {backend.logs(job)}")


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "run")


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_a_killed_rule_evaluator_fails_the_job_and_its_rules(backend: LocalBackend) -> None:
    backend.launch("job", spec("gated").model_copy(update={"rules": WATCHED}))
    status = wait_training(backend, "job")
    os.kill(status["evaluator_pid"], signal.SIGKILL)
    ended = wait_final(backend, "job", timeout=40)
    assert ended.status is JobStatus.Failed
    assert ended.failure_reason is not None
    assert ended.failure_reason.startswith(
        "InternalServerError: the rule evaluator exited with status -9"
    )
    assert ended.failure_reason.endswith("unjudged: Loss")
    [rule] = ended.rules
    assert rule.status == "Error" and "exited with status -9" in rule.details


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_a_stopped_training_process_is_noticed_and_ended(backend: LocalBackend) -> None:
    frozen = spec("gated", progress_timeout_s=10.0)  # its start-up (torch import) too
    backend.launch("job", frozen)
    training = wait_training(backend, "job")["training_pid"]
    os.kill(training, signal.SIGSTOP)
    ended = wait_final(backend, "job", timeout=60)
    assert ended.status is JobStatus.Failed
    assert "no progress for " in str(ended.failure_reason)
    assert "(run_spec.progress_timeout_s 10)" in str(ended.failure_reason)
    assert str(ended.failure_reason).endswith("the training process is stopped (T)")


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_a_killed_process_group_leaves_no_rule_pending(backend: LocalBackend) -> None:
    backend.launch("job", spec("gated").model_copy(update={"rules": WATCHED}))
    status = wait_training(backend, "job")
    os.killpg(status["supervisor_pid"], signal.SIGKILL)  # supervisor, training, evaluator
    ended = wait_final(backend, "job", timeout=20)
    assert ended.status is JobStatus.Failed
    assert ended.failure_reason == "InternalServerError: the job's supervisor process disappeared"
    [rule] = ended.rules
    assert rule.status == "Error"
    assert rule.details.startswith("the job ended before the rule evaluator judged this rule")


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_a_supervisor_that_cannot_start_fails_at_once_naming_why(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHOME", "/nonexistent")  # its interpreter cannot even start
    started = time.monotonic()
    backend.launch("job", spec("quick"))
    monkeypatch.delenv("PYTHONHOME")
    ended = wait_final(backend, "job", timeout=30)
    assert time.monotonic() - started < 30  # not after START_TIMEOUT_S, not relaunched
    assert ended.status is JobStatus.Failed
    assert ended.failure_reason == (
        "ClientError: the job's supervisor exited before starting the job: "
        "ModuleNotFoundError: No module named 'encodings'"
    )


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_a_lost_pid_file_or_a_killed_supervisor_does_not_redo_the_work(
    backend: LocalBackend,
) -> None:
    backend.launch("job", spec("gated"))
    status = wait_training(backend, "job")
    backend.paths("job").supervisor_pid.unlink()  # the pid is in status.json too
    assert backend.describe("job").status is JobStatus.InProgress
    os.kill(status["supervisor_pid"], signal.SIGKILL)  # the training process goes on
    time.sleep(0.5)
    assert backend.describe("job").status is JobStatus.InProgress
    (backend.run_dir / "release").touch()
    ended = wait_final(backend, "job", timeout=30)
    assert ended.status is JobStatus.Completed  # its result says so: never relaunched
    assert len((backend.paths("job").root / "launches.txt").read_text().split()) == 1


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_a_job_that_cannot_start_fails_naming_why(backend: LocalBackend) -> None:
    """Past the OS's argument limit (the preflight refuses it; launched here anyway) the
    training process can never start: Failed with the reason, not an infrastructure
    failure the flow would relaunch unchanged."""
    from remedy.jobs import is_infrastructure_failure

    huge = spec("quick", hyperparameters={"blob": "x" * (200 * 1024)})
    backend.launch("job", huge)
    ended = wait_final(backend, "job", timeout=120)
    assert ended.status is JobStatus.Failed
    assert "Argument list too long" in str(ended.failure_reason), ended.failure_reason
    assert not is_infrastructure_failure(ended.failure_reason)


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_a_frozen_fast_job_is_caught_by_its_learned_limit(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixed limit stays at its default (30 minutes); the job moves every 0.05 s, and
    the supervisor looks every second, so its learned limit is 20 x about a second, the
    floor set low here for the test."""
    monkeypatch.setenv("REMEDY_PROGRESS_FLOOR_S", "5")
    backend.launch("job", spec("gated"))
    training = wait_training(backend, "job")["training_pid"]
    deadline = time.monotonic() + 120
    while (status_of(backend, "job").get("progress_limit_s") or 1800) >= 1800:  # learned
        assert time.monotonic() < deadline, status_of(backend, "job")
        time.sleep(0.2)
    os.kill(training, signal.SIGSTOP)
    ended = wait_final(backend, "job", timeout=300)
    assert ended.status is JobStatus.Failed
    assert "learned from its pace" in str(ended.failure_reason), ended.failure_reason
    assert str(ended.failure_reason).endswith("the training process is stopped (T)")

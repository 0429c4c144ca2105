"""The local backend with real supervisor and entry-point processes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from remedy.jobs import JobNotFound, is_infrastructure_failure
from remedy.jobs.local import LocalBackend
from remedy.state_schema import JobStatus, RunSpec
from tests.helpers.local_jobs import spec, wait_final

FINAL = ("Completed", "Failed", "Stopped")


def launches(backend: LocalBackend, name: str) -> int:
    path = backend.paths(name).root / "launches.txt"
    return len(path.read_text().split()) if path.exists() else 0


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a reaper in containers)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "run")


def test_completed_job_reports_status_and_logs(backend: LocalBackend) -> None:
    backend.launch("quick", spec("quick", hyperparameters={"lr": 0.05}))
    description = wait_final(backend, "quick")
    assert description.status is JobStatus.Completed
    assert description.failure_reason is None
    assert "trained with lr 0.05" in backend.logs("quick")


def test_final_metrics_come_from_result_json(backend: LocalBackend) -> None:
    backend.launch("quick", spec("quick"))
    wait_final(backend, "quick")
    result = {"status": "Completed", "steps": 3, "final_loss": 0.5, "final_accuracy": 0.8}
    backend.paths("quick").result.write_text(json.dumps(result))
    description = backend.describe("quick")
    assert description.final_metrics == {"test:loss": 0.5, "test:accuracy": 0.8}
    assert description.progress.step == 3  # no progress file: the result's steps


def test_launch_is_idempotent_per_job_name(backend: LocalBackend) -> None:
    backend.launch("once", spec("quick"))
    backend.launch("once", spec("quick"))
    wait_final(backend, "once")
    LocalBackend(backend.run_dir).launch("once", spec("quick"))  # e.g. a resumed flow
    time.sleep(1.0)
    assert launches(backend, "once") == 1


def test_exception_is_an_algorithm_error_naming_it(backend: LocalBackend) -> None:
    backend.launch("crash", spec("crashes"))
    description = wait_final(backend, "crash")
    assert description.status is JobStatus.Failed
    reason = description.failure_reason
    assert reason.startswith("AlgorithmError") and "shapes do not match" in reason
    assert not is_infrastructure_failure(reason)


def test_killed_by_signal_is_an_infrastructure_failure(backend: LocalBackend) -> None:
    backend.launch("oom", spec("killed"))
    description = wait_final(backend, "oom")
    assert description.status is JobStatus.Failed
    assert "SIGKILL" in description.failure_reason
    assert is_infrastructure_failure(description.failure_reason)


def test_graceful_stop(backend: LocalBackend) -> None:
    backend.launch("long", spec("obedient"))
    while backend.describe("long").progress is None:
        time.sleep(0.1)
    started = time.monotonic()
    backend.stop("long")
    assert time.monotonic() - started < 5  # the stop file: no grace waited
    description = backend.describe("long")
    assert description.status is JobStatus.Stopped
    assert description.progress.step >= 1
    assert not (backend.paths("long").root / "sigterm.json").exists()


def test_a_job_deaf_to_the_stop_file_gets_sigterm_after_the_grace(backend: LocalBackend) -> None:
    backend.launch("deaf", spec("deaf", stop_grace_s=1.0, kill_after_s=30.0))
    while backend.describe("deaf").progress is None:
        time.sleep(0.1)
    requested = time.time()
    backend.stop("deaf")
    assert backend.describe("deaf").status is JobStatus.Stopped
    sigterm = json.loads((backend.paths("deaf").root / "sigterm.json").read_text())["time"]
    assert 1.0 <= sigterm - requested < 1.0 + 3.0  # the grace, then SIGTERM at once
    assert time.time() - requested < 1.0 + 10.0  # and not the kill timeout


def test_stop_escalates_to_kill(backend: LocalBackend) -> None:
    backend.launch("stubborn", spec("stubborn", stop_grace_s=0.5, kill_after_s=1.0))
    while launches(backend, "stubborn") == 0:
        time.sleep(0.1)
    started = time.monotonic()
    backend.stop("stubborn")
    assert backend.describe("stubborn").status is JobStatus.Stopped
    assert time.monotonic() - started < 0.5 + 1.0 + 10.0  # not the backend's last resort
    training_pid = int((backend.paths("stubborn").root / "launches.txt").read_text())
    assert not running(training_pid)
    assert "SIGKILL" not in (backend.describe("stubborn").failure_reason or "")


def test_a_stop_request_from_the_evaluator_is_escalated_without_the_flow(
    backend: LocalBackend,
) -> None:
    # The rule evaluator writes the stop file itself (StopTraining): no backend.stop() call.
    backend.launch("alone", spec("deaf", stop_grace_s=0.5))
    while backend.describe("alone").progress is None:
        time.sleep(0.1)
    backend.paths("alone").stop_request.write_text("{}")
    description = wait_final(backend, "alone", timeout=15)
    assert description.status is JobStatus.Stopped
    assert (backend.paths("alone").root / "sigterm.json").exists()


def test_vanished_supervisor_is_failed_not_a_hang(backend: LocalBackend) -> None:
    backend.launch("orphan", spec("obedient"))
    while backend.describe("orphan").progress is None:
        time.sleep(0.1)
    pid = int(backend.paths("orphan").supervisor_pid.read_text())
    os.killpg(pid, signal.SIGKILL)  # host lost the whole job, no final status written
    deadline = time.monotonic() + 10
    while backend.describe("orphan").status is not JobStatus.Failed:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    reason = backend.describe("orphan").failure_reason
    assert "disappeared" in reason and is_infrastructure_failure(reason)


def test_unknown_job(backend: LocalBackend) -> None:
    with pytest.raises(JobNotFound, match="nope"):
        backend.describe("nope")


def test_run_spec_tensorboard_exports_what_the_debugger_saves(backend: LocalBackend) -> None:
    """run_spec.local.tensorboard: the built-in job's saved tensors also as TensorBoard event
    files in its folder, readable as TensorBoard reads them."""
    from remedy.debugger.tfevents import read_events
    from tests.flows.specs import tiny_spec

    tiny = tiny_spec(add_batch_norm=1, num_epochs=1, local={"tensorboard": True})
    backend.launch("tb", tiny)
    assert wait_final(backend, "tb", timeout=180).status == JobStatus.Completed
    files = sorted((backend.paths("tb").root / "tensorboard").rglob("events.out.tfevents.*"))
    assert files, "no event file"
    steps = {event.step for path in files for event in read_events(path) if event.values}
    assert len(steps) >= 2  # several saved steps, not a stub file
    # off by default, and never ignored on the cloud backend
    assert RunSpec().local is None
    from remedy.jobs.sagemaker.backend import SageMakerBackend

    with pytest.raises(ValueError, match="run_spec.local.tensorboard"):
        SageMakerBackend.check(RunSpec(backend="sagemaker", local={"tensorboard": True}))

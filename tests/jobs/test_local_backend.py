"""The local backend with real supervisor and entry-point processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from remedy.jobs import JobNotFound, JobSnapshot, is_infrastructure_failure
from remedy.jobs.local import LocalBackend
from remedy.state_schema import JobStatus, RunSpec

FINAL = ("Completed", "Failed", "Stopped")


def spec(entry: str, **fields: object) -> RunSpec:
    return RunSpec(entry_point=f"tests.jobs.entry_points.{entry}", rules=[], **fields)


def wait_final(backend: LocalBackend, name: str, timeout: float = 60.0) -> JobSnapshot:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        description = backend.describe(name)
        if description.is_final:
            return description
        time.sleep(0.1)
    raise AssertionError(f"{name} not final after {timeout}s: {backend.describe(name)}")


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
    return LocalBackend(tmp_path / "run", stop_grace_s=5.0)


def test_completed_job_reports_metrics_and_logs(backend: LocalBackend) -> None:
    backend.launch("quick", spec("quick", learning_rate=0.05))
    description = wait_final(backend, "quick")
    assert description.status is JobStatus.Completed
    assert description.failure_reason is None
    assert description.final_metrics["test:accuracy"] == 0.8
    assert "trained with lr 0.05" in backend.logs("quick")


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
    backend.stop("long")
    description = backend.describe("long")
    assert description.status is JobStatus.Stopped
    assert description.progress.step >= 1


def test_stop_escalates_to_kill(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run", stop_grace_s=1.0)
    backend.launch("stubborn", spec("stubborn"))
    while launches(backend, "stubborn") == 0:
        time.sleep(0.1)
    backend.stop("stubborn")
    assert backend.describe("stubborn").status is JobStatus.Stopped
    training_pid = int((backend.paths("stubborn").root / "launches.txt").read_text())
    assert not running(training_pid)


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

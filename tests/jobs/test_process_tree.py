"""Nothing outlives its job: what a training script forks, in its own session too, ends
with the job, whether it completes or is stopped (adversarial suite)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from remedy.jobs.local import LocalBackend
from remedy.jobs.local.process_tree import running
from remedy.state_schema import JobStatus
from tests.helpers.local_jobs import spec, wait_final
from tests.tmpfs import fill, full_disk


def children(backend: LocalBackend, job: str) -> list[int]:
    path = backend.paths(job).root / "children.json"
    deadline = time.monotonic() + 120
    while not path.exists():
        assert time.monotonic() < deadline, backend.logs(job)
        time.sleep(0.1)
    return json.loads(path.read_text())


@pytest.mark.adversarial("fault injection", fails_as="leaked")
def test_the_processes_a_completed_job_left_are_gone(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    backend.launch("job", spec("leaves_children"))
    pids = children(backend, "job")
    assert all(running(pid) for pid in pids)  # the job really left them running
    assert wait_final(backend, "job", timeout=120).status is JobStatus.Completed
    assert [pid for pid in pids if running(pid)] == []


@pytest.mark.adversarial("fault injection", fails_as="leaked")
def test_the_processes_a_stopped_job_left_are_gone(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    backend.launch("job", spec("leaves_children", hyperparameters={"wait": 1}))
    pids = children(backend, "job")
    assert all(running(pid) for pid in pids)
    backend.stop("job")
    assert backend.describe("job").status is JobStatus.Stopped
    assert [pid for pid in pids if running(pid)] == []


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_stopping_a_job_works_on_a_full_disk(tmp_path: Path) -> None:
    """The disk fills while the job trains: the stop file cannot be written, so the stop
    reaches the supervisor by signal; the job ends, and nothing of it keeps running."""
    with full_disk(tmp_path / "disk", "16m") as disk:
        backend = LocalBackend(disk / "run")
        backend.launch("job", spec("leaves_children", hyperparameters={"wait": 1}))
        pids = children(backend, "job")
        supervisor = json.loads(backend.paths("job").status.read_text())["supervisor_pid"]
        fill(disk)
        backend.stop("job")  # no ENOSPC out of it
        assert backend.describe("job").is_final
        assert not running(supervisor)
        assert [pid for pid in pids if running(pid)] == []

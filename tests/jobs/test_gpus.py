"""GPU assignment of local jobs: one job per device by default, across runs, never leaked.

No GPU is needed: the devices remedy hands out are CUDA_VISIBLE_DEVICES's entries, and
what is checked is which of them each real job process is given."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remedy.jobs.local import LocalBackend
from remedy.jobs.local.gpus import (
    GpuSettingError,
    gpus_wanted,
    jobs_per_gpu,
    try_lease,
    visible_devices,
)
from remedy.state_schema import JobStatus, RunSpec
from remedy.tasks.preflight import PreflightError, preflight
from tests.helpers.local_jobs import spec, wait_final

ENTRY_POINTS = Path(__file__).with_name("entry_points").resolve()


@pytest.fixture
def gpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine whose visible devices are 3 and 5; the lock folder is the test's own."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setenv("REMEDY_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("REMEDY_JOBS_PER_GPU", raising=False)
    return tmp_path / "locks"


def status_file(backend: LocalBackend, job: str) -> dict:
    path = backend.paths(job).status
    return json.loads(path.read_text()) if path.exists() else {}


def wait_for(predicate: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def test_visible_devices_and_settings() -> None:
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0, 1"}) == ["0", "1"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-8f3a"}) == ["GPU-8f3a"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert gpus_wanted(None, 2) == 1
    assert gpus_wanted(None, 0) == 0
    assert gpus_wanted(0, 2) == 0
    with pytest.raises(GpuSettingError, match=r"run_spec.local.gpus_per_job is 3, but only 2"):
        gpus_wanted(3, 2)
    assert jobs_per_gpu({}) == 1
    with pytest.raises(GpuSettingError, match="REMEDY_JOBS_PER_GPU='two'"):
        jobs_per_gpu({"REMEDY_JOBS_PER_GPU": "two"})


def test_leases_spread_over_devices_and_share_only_when_allowed(tmp_path: Path) -> None:
    devices = ["0", "1"]
    first = try_lease(1, devices, 2, tmp_path, "a")
    second = try_lease(1, devices, 2, tmp_path, "b")
    assert first is not None and second is not None
    assert (first.devices, second.devices) == (["0"], ["1"])  # not both on device 0
    third = try_lease(1, devices, 2, tmp_path, "c")
    assert third is not None and third.devices == ["0"]  # two jobs per device allowed
    assert try_lease(2, devices, 2, tmp_path, "d") is None  # two distinct devices: only 1 free
    fourth = try_lease(1, devices, 2, tmp_path, "e")
    assert fourth is not None and fourth.devices == ["1"]
    assert try_lease(1, devices, 2, tmp_path, "f") is None  # every slot taken
    first.release()
    again = try_lease(1, devices, 2, tmp_path, "g")
    assert again is not None and again.devices == ["0"]


def test_a_lease_dies_with_its_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from remedy.jobs.local.gpus import try_lease; "
            f"lease = try_lease(1, ['0'], 1, Path({str(tmp_path)!r}), 'holder'); "
            "print('held' if lease else 'none', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert try_lease(1, ["0"], 1, tmp_path, "me") is None
        assert "holder" in (tmp_path / "0.slot0.lock").read_text()
    finally:
        holder.kill()
        holder.wait()
    assert try_lease(1, ["0"], 1, tmp_path, "me") is not None  # killed: the kernel freed it


def test_each_job_gets_its_own_gpu_and_a_third_waits(tmp_path: Path, gpu_machine: Path) -> None:
    one, two = LocalBackend(tmp_path / "run-1"), LocalBackend(tmp_path / "run-2")  # two runs
    one.launch("a", spec("gated"))
    two.launch("b", spec("gated"))
    wait_for(lambda: "gpus" in status_file(one, "a") and "gpus" in status_file(two, "b"), "leased")
    taken = {*status_file(one, "a")["gpus"], *status_file(two, "b")["gpus"]}
    assert taken == {"3", "5"}

    one.launch("c", spec("gated"))
    wait_for(lambda: one.describe("c").status_message is not None, "c waits")
    waiting = one.describe("c")
    assert waiting.status is JobStatus.InProgress
    assert waiting.secondary_status == "Starting"
    assert "waiting for 1 free GPU(s): all of 3,5 are taken" in str(waiting.status_message)
    assert "training_pid" not in status_file(one, "c")  # nothing started

    freed = status_file(one, "a")["gpus"]
    one.stop("a")
    wait_for(lambda: "gpus" in status_file(one, "c"), "c leases the freed GPU")
    assert status_file(one, "c")["gpus"] == freed
    assert one.describe("c").status_message is None
    for backend, job in ((one, "c"), (two, "b")):
        backend.stop(job)
        assert wait_final(backend, job).status is JobStatus.Stopped


def test_the_job_sees_only_its_devices(tmp_path: Path, gpu_machine: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    script = {"source_dir": str(ENTRY_POINTS), "entry_point": "dump_env.py", "rules": []}
    for job, gpus, seen, counted in (("one", None, "3", "1"), ("none", 0, "", "0")):
        backend.launch(job, RunSpec(**script, gpus_per_job=gpus))
        assert wait_final(backend, job).status is JobStatus.Completed, backend.logs(job)
        env = json.loads((backend.paths(job).root / "dump.json").read_text())["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == seen
        assert env["SM_NUM_GPUS"] == counted
        assert json.loads(env["SM_TRAINING_ENV"])["num_gpus"] == int(counted)


def test_a_stop_ends_the_wait(tmp_path: Path, gpu_machine: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    backend.launch("both", spec("gated", gpus_per_job=2))
    wait_for(lambda: "gpus" in status_file(backend, "both"), "both devices leased")
    backend.launch("next", spec("gated"))
    wait_for(lambda: backend.describe("next").status_message is not None, "next waits")
    backend.stop("next")
    assert wait_final(backend, "next").status is JobStatus.Stopped
    backend.stop("both")
    wait_final(backend, "both")


def test_more_gpus_than_the_machine_has_is_refused_before_launch(
    tmp_path: Path, gpu_machine: Path
) -> None:
    too_many = spec("quick", gpus_per_job=3)
    with pytest.raises(PreflightError, match=r"run_spec.local.gpus_per_job is 3, but only 2 GPU"):
        preflight(too_many)
    backend = LocalBackend(tmp_path / "run")
    with pytest.raises(GpuSettingError, match="gpus_per_job"):
        backend.launch("many", too_many)
    assert not backend.exists("many")


def test_a_bad_machine_setting_fails_the_job_naming_it(
    tmp_path: Path, gpu_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMEDY_JOBS_PER_GPU", "0")
    backend = LocalBackend(tmp_path / "run")
    backend.launch("bad", spec("quick"))
    ended = wait_final(backend, "bad")
    assert ended.status is JobStatus.Failed
    assert ended.failure_reason == (
        "ClientError: REMEDY_JOBS_PER_GPU='0': must be a whole number >= 1"
    )

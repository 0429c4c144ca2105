"""GPUs for local jobs: each job gets its own device(s), across every run on the machine.

A job's supervisor leases its devices before it starts the training process and holds them
until the job ends: one lock file per device slot, locked with fcntl.flock, which the kernel
releases when the supervisor ends however it ends, so no crash leaks a GPU. A job that finds
every device taken waits (its status says so) until one is free or it is asked to stop. The
training process sees only its devices, renumbered from 0, through CUDA_VISIBLE_DEVICES.

Machine settings, read from the environment of the flow or worker that launches the jobs:
  CUDA_VISIBLE_DEVICES   the devices remedy hands out (default: every /dev/nvidiaN)
  REMEDY_JOBS_PER_GPU    how many jobs may share one device (default 1)
  REMEDY_GPU_LOCK_DIR    the lock files' folder, shared by every run (default <tmp>/remedy-gpus)
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

JOBS_PER_GPU_ENV = "REMEDY_JOBS_PER_GPU"
GPU_LOCK_DIR_ENV = "REMEDY_GPU_LOCK_DIR"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


class GpuSettingError(ValueError):
    """A GPU setting of the machine or the run_spec that cannot be met."""


def visible_devices(environ: Mapping[str, str]) -> list[str]:
    """The devices jobs may use: CUDA_VISIBLE_DEVICES's entries (indexes or UUIDs) when it is
    set, else the NVIDIA devices present (found without importing torch)."""
    visible = environ.get(CUDA_VISIBLE_DEVICES)
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip()]
    found = [p.name[len("nvidia") :] for p in Path("/dev").glob("nvidia*")]
    return sorted((index for index in found if index.isdigit()), key=int)


def jobs_per_gpu(environ: Mapping[str, str]) -> int:
    text = environ.get(JOBS_PER_GPU_ENV, "1")
    if not text.isdigit() or int(text) < 1:
        raise GpuSettingError(f"{JOBS_PER_GPU_ENV}={text!r}: must be a whole number >= 1")
    return int(text)


def lock_dir(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(GPU_LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "remedy-gpus")


def gpus_wanted(requested: int | None, visible: int) -> int:
    """GPUs a job gets: run_spec.local.gpus_per_job, or one when the machine has any."""
    wanted = (1 if visible else 0) if requested is None else requested
    if wanted > visible:
        raise GpuSettingError(
            f"run_spec.local.gpus_per_job is {wanted}, but only {visible} GPU(s) are visible "
            f"({CUDA_VISIBLE_DEVICES} or /dev/nvidiaN)"
        )
    return wanted


@dataclass
class GpuLease:
    """Devices held for one job; release() (or the holder's exit) frees them."""

    devices: list[str]
    _descriptors: list[int] = field(default_factory=list, repr=False)

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(self.devices)

    def release(self) -> None:
        for descriptor in self._descriptors:
            os.close(descriptor)  # closing the file drops its flock
        self._descriptors.clear()


def try_lease(
    count: int, devices: list[str], per_gpu: int, folder: Path, holder: str
) -> GpuLease | None:
    """`count` distinct devices with a free slot, or None when there are not that many now.

    Slots are tried slot by slot across devices, so jobs spread over the devices before
    any device takes a second job."""
    folder.mkdir(parents=True, exist_ok=True)
    lease = GpuLease(devices=[])
    for slot in range(per_gpu):
        for device in devices:
            if len(lease.devices) == count:
                return lease
            if device in lease.devices:
                continue
            descriptor = _lock(folder / f"{_file_name(device)}.slot{slot}.lock", holder)
            if descriptor is not None:
                lease.devices.append(device)
                lease._descriptors.append(descriptor)
    if len(lease.devices) == count:
        return lease
    lease.release()
    return None


def _lock(path: Path, holder: str) -> int | None:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    os.ftruncate(descriptor, 0)  # who holds it, for a person looking at the folder
    os.write(descriptor, f"{holder}\n".encode())
    return descriptor


def _file_name(device: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", device)

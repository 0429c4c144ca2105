"""What the figures a job measures for the policy share (training/gradient_agreement.py,
training/update_ratio.py): taken at a few updates, never ending the training, never
waiting for a device.

A figure measured on the CPU is read at once. On a device (or `staged`: a device's path on
the CPU, for tests on CPU-only torch) it goes to the host by a non-blocking copy
(debugger/host_copy.py) and is returned with the first update that finds the copy done.
A failure to measure is said once, as a warning in the job's log, and nothing more is
measured: the policy then has no such figure to read.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import torch

from remedy.debugger.host_copy import HostCopier, HostCopy

# The most values a figure keeps a copy of between updates (4 MiB of float32): a larger
# model is sampled (sampled_parts).
MAX_ELEMENTS = 1 << 20


class PolicyFigures:
    """A figure measured every few updates: `take` runs a measurement, guarded; `publish`
    sends a figure on its way to the host; `ready` returns those that arrived."""

    name: str  # as the warning says it: "gradient agreement"

    def __init__(self, buffers: int, staged: bool = False) -> None:
        self.staged = staged
        self.copier = HostCopier(max_buffers=buffers, staged=staged)
        self.read: dict[str, float] = {}  # measured on the CPU, not yet returned
        self.measured: list[tuple[str, HostCopy]] = []  # a device's, on their way to the host
        self.off = False  # after a failure to measure: said once, then nothing is measured

    def take(self, step: int, measure: Callable[[], None]) -> None:
        """Run `measure` for update `step` without autograd; a failure turns the figure
        off, said once (a figure for the policy must never end the training)."""
        if self.off:
            return
        try:
            with torch.no_grad():
                measure()
        except Exception as exc:
            self.off = True
            warnings.warn(
                f"{self.name} not measured from update {step} on: {exc!r}",
                RuntimeWarning,
                stacklevel=3,
            )

    def publish(self, field: str, figure: torch.Tensor) -> None:
        """A 0-d figure for the step records' `field`: read now on the CPU, else copied to
        the host without waiting (ready reads it once there)."""
        if figure.device.type == "cpu" and not self.staged:
            self.read[field] = figure.item()
        else:
            self.measured.append((field, self.copier.start(figure[None])))

    def ready(self) -> dict[str, float]:
        """The figures read, and those whose copy to the host is complete, finite ones
        only: never waits ({} mostly)."""
        if not self.read and not self.measured:
            return {}
        figures, self.read = self.read, {}
        waiting: list[tuple[str, HostCopy]] = []
        for field, copy in self.measured:
            if not copy.event.query():
                waiting.append((field, copy))
                continue
            figures[field] = float(copy.host[0])
            copy.release()
        self.measured = waiting
        return {field: x for field, x in figures.items() if math.isfinite(x)}


def sampled_parts(
    tensors: Sequence[torch.Tensor], max_elements: int = MAX_ELEMENTS
) -> list[torch.Tensor]:
    """Each tensor flat: every value, or every k-th, so that about max_elements are kept
    over all of them, one more at most per tensor (views: clone to keep). The same values
    each time, so two updates' samples compare value for value."""
    total = sum(t.numel() for t in tensors)
    stride = math.ceil(total / max_elements)
    return [t.reshape(-1) if stride <= 1 else t.reshape(-1)[::stride] for t in tensors]


def on_one_device(figures: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Per-tensor figures of a model split over devices, on the first one's."""
    device = figures[0].device
    if all(f.device == device for f in figures):
        return list(figures)
    return [f.to(device) for f in figures]

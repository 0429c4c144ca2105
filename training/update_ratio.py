"""The job's side of the update ratio (state_schema/update_ratio.py): how far the updates
move the weights, as a fraction of themselves.

Every AGREEMENT_EVERY updates (every SPARSE_EVERY past update DENSE_UNTIL) a copy of the
trained weights is kept; at the next such update, each weight's ||w(now) - w(kept)|| /
||w(kept)||, divided by the updates in between, is taken and the median over the weights
recorded (UPDATE_RATIO_FIELD): the weights' net movement per update, as the TinyUpdates
rule measures it between saved steps. A median, not the whole model's ratio: a frozen or
barely used weight (an embedding of rare tokens, a bias still at zero) does not hide the
rest.

Cost: at each of those updates, one copy of the weights, one subtraction and two
norms per weight (torch's foreach kernels). Memory: the kept copy, at most MAX_ELEMENTS
values (4 MiB) on the weights' device: larger weights are sampled, every k-th value of
each (the same values each time), which estimates each weight's ratio. On a GPU nothing
is read back at the update it is measured: the median goes to the host by a non-blocking
copy (debugger/host_copy.py) and is recorded with the first update that finds the copy
done. A failure to measure is said once, as a warning, and nothing more is measured.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence

import torch

from remedy.debugger.host_copy import HostCopier, HostCopy
from remedy.state_schema.gradient_agreement import AGREEMENT_EVERY
from remedy.state_schema.update_ratio import UPDATE_RATIO_FIELD

MAX_ELEMENTS = 1 << 20
# Every AGREEMENT_EVERY updates up to here (a stall is found early: TinyUpdates at update
# 10), then every SPARSE_EVERY (a long run's later figures add little to its median, and
# each costs about 0.2 ms on a small CPU model: 0.035 ms a step every 5, 0.007 every 25).
DENSE_UNTIL = 100
SPARSE_EVERY = 25


class UpdateRatio:
    """Feed it each update (see); it returns the figure ready for that update's step
    record ({} mostly)."""

    def __init__(self, every: int = AGREEMENT_EVERY, staged: bool = False) -> None:
        """staged: take a device's path on the CPU too (tests on CPU-only torch)."""
        self.every = every
        self.staged = staged
        self.kept: list[torch.Tensor] | None = None  # the sampled weights at update kept_at
        self.kept_sizes = torch.zeros(0)  # their norms
        self.kept_at = 0
        self.kept_of: tuple[int, ...] = ()  # of which parameters
        self.copier = HostCopier(max_buffers=2, staged=staged)
        self.read: float | None = None  # measured on the CPU, not yet returned
        self.measured: list[HostCopy] = []  # a device's, on their way to the host
        self.off = False

    def see(self, step: int, parameters: Callable[[], Iterable[torch.Tensor]]) -> dict[str, float]:
        """The update `step` (1 for the first), `parameters()` the model's parameters
        (listed only at the updates measured)."""
        every = self.every if step <= DENSE_UNTIL else SPARSE_EVERY
        if step % every == 0 and not self.off:
            try:
                with torch.no_grad():
                    trained = [
                        p
                        for p in parameters()
                        if p.requires_grad and p.grad is not None and p.layout == torch.strided
                    ]
                    if trained:
                        self.measure(step, trained)
            except Exception as exc:  # a measure for the policy must never end the training
                self.off = True
                warnings.warn(
                    f"update ratio not measured from update {step} on: {exc!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self.ready() if self.read is not None or self.measured else {}

    def measure(self, step: int, trained: Sequence[torch.Tensor]) -> None:
        """Compare the weights with those kept `every` updates ago (where the same
        weights were kept), then keep these."""
        now = sampled(trained)
        sizes = torch.stack(on_one_device(torch._foreach_norm(now))).float()
        of = tuple(id(p) for p in trained)
        if self.kept is not None and of == self.kept_of:
            moved = torch.stack(
                on_one_device(torch._foreach_norm(torch._foreach_sub(now, self.kept)))
            )
            # per update; a weight at zero (a bias not yet moved) has no ratio: nan, passed over
            ratios = torch.where(self.kept_sizes > 0, moved.float() / self.kept_sizes, math.nan)
            ratio = torch.nanmedian(ratios) / (step - self.kept_at)
            if ratio.device.type == "cpu" and not self.staged:
                self.read = ratio.item()
            else:
                self.measured.append(self.copier.start(ratio[None]))
        self.kept, self.kept_sizes = [w.clone() for w in now], sizes
        self.kept_at, self.kept_of = step, of

    def ready(self) -> dict[str, float]:
        """The figure read, or one whose copy to the host is complete: never waits."""
        figure, self.read = self.read, None
        waiting: list[HostCopy] = []
        for copy in self.measured:
            if copy.event.query():
                figure = float(copy.host[0])
                copy.release()
            else:
                waiting.append(copy)
        self.measured = waiting
        return {} if figure is None or not math.isfinite(figure) else {UPDATE_RATIO_FIELD: figure}


def sampled(
    weights: Sequence[torch.Tensor], max_elements: int = MAX_ELEMENTS
) -> list[torch.Tensor]:
    """Each weight flat: every value, or every k-th, so that about max_elements are kept
    over all of them (views: clone to keep)."""
    total = sum(w.numel() for w in weights)
    stride = math.ceil(total / max_elements)
    return [w.reshape(-1) if stride <= 1 else w.reshape(-1)[::stride] for w in weights]


def on_one_device(figures: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Per-weight figures of a model split over devices, on the first one's."""
    device = figures[0].device
    if all(f.device == device for f in figures):
        return list(figures)
    return [f.to(device) for f in figures]

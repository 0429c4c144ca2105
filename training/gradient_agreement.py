"""The job's side of gradient agreement (state_schema/gradient_agreement.py): every
AGREEMENT_EVERY updates, one copy of the update's gradients is kept and compared with the
next update's (lag 1) and the fifth's (lag 5), where the next copy is taken.

Cost: at each of those updates, one gather of the gradients into a flat float32 vector and
a dot product; about 2 per AGREEMENT_EVERY updates. Memory: the kept copy, at most
MAX_ELEMENTS values (4 MiB) on the gradients' device: a model with more gradient values is
sampled, every k-th value of each tensor (the same values each time), which estimates the
cosine of the whole. Sparse gradients are left out. A failure to measure (a gradient
of a kind torch cannot gather) is said once, as a warning in the job's log, and nothing
more is measured: the verdict then has no agreement to ask on. On a GPU nothing is read
back at the update it is measured: each figure goes to the host by a non-blocking copy
(debugger/host_copy.py), and is recorded with the first update that finds the copy done,
never waiting for it (an update or two after its own: the last third's mean does not
notice).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence

import torch

from remedy.debugger.host_copy import HostCopier, HostCopy
from remedy.state_schema.gradient_agreement import AGREEMENT_EVERY, AGREEMENT_FIELDS, LAGS

MAX_ELEMENTS = 1 << 20


class GradientAgreement:
    """Feed it each update (see); it returns the figures ready for that update's step
    record."""

    def __init__(self, every: int = AGREEMENT_EVERY, staged: bool = False) -> None:
        """staged: take a device's path (a copy to a host buffer, read once complete) on
        the CPU too, as debugger/host_copy.py's staged does (tests on CPU-only torch)."""
        self.every = every
        self.staged = staged
        self.kept: torch.Tensor | None = None  # the sampled gradients of update kept_at
        self.kept_sq = torch.zeros(())  # its squared norm
        self.kept_at = 0
        self.kept_of: tuple[int, ...] = ()  # of which parameters
        self.copier = HostCopier(max_buffers=len(LAGS) * 2, staged=staged)
        self.read: dict[str, float] = {}  # measured on the CPU, not yet returned
        self.measured: list[tuple[str, HostCopy]] = []  # a device's, on their way to the host
        self.off = False  # after a failure to measure: said once, then nothing is measured

    def see(self, step: int, parameters: Callable[[], Iterable[torch.Tensor]]) -> dict[str, float]:
        """The update `step` (1 for the first), `parameters()` holding its gradients, not
        yet applied (listed only at the updates measured); the figures to record with it
        ({} mostly)."""
        lag = step - self.kept_at
        due = self.kept is not None and lag in LAGS
        keep = step % self.every == 0
        if (due or keep) and not self.off:
            try:
                with torch.no_grad():
                    self.measure(step, list(parameters()), lag if due else None, keep)
            except Exception as exc:  # a measure for the verdict must never end the training
                self.off = True
                warnings.warn(
                    f"gradient agreement not measured from update {step} on: {exc!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self.ready() if self.read or self.measured else {}

    def measure(
        self, step: int, params: Sequence[torch.Tensor], lag: int | None, keep: bool
    ) -> None:
        # dense gradients only: a sparse one (an nn.Embedding(sparse=True)) changes shape
        with_grads = [p for p in params if p.grad is not None and p.grad.layout == torch.strided]
        if not with_grads:
            return
        grads = [p.grad for p in with_grads if p.grad is not None]
        of = tuple(id(p) for p in with_grads)
        current = sampled(grads)
        current_sq = torch.dot(current, current)
        if lag is not None and of == self.kept_of and self.kept is not None:
            # the cosine, in few operations: each costs microseconds on a small model
            similarity = torch.dot(self.kept, current) * torch.rsqrt(self.kept_sq * current_sq)
            if similarity.device.type == "cpu" and not self.staged:
                self.read[AGREEMENT_FIELDS[lag]] = similarity.item()
            else:  # on its way to the host; read once there (ready)
                self.measured.append((AGREEMENT_FIELDS[lag], self.copier.start(similarity[None])))
        if keep:
            self.kept, self.kept_sq, self.kept_at, self.kept_of = current, current_sq, step, of

    def ready(self) -> dict[str, float]:
        """The figures read, and those whose copy to the host is complete: never waits."""
        figures, self.read = self.read, {}
        waiting: list[tuple[str, HostCopy]] = []
        for name, copy in self.measured:
            if not copy.event.query():
                waiting.append((name, copy))
                continue
            figures[name] = float(copy.host[0])
            copy.release()
        self.measured = waiting
        return {name: x for name, x in figures.items() if math.isfinite(x)}


def sampled(grads: Sequence[torch.Tensor], max_elements: int = MAX_ELEMENTS) -> torch.Tensor:
    """The gradients as one float32 vector on the first one's device: every value, or
    every k-th of each tensor, so that about max_elements are kept (one more at most per
    tensor)."""
    total = sum(g.numel() for g in grads)
    stride = math.ceil(total / max_elements)
    device = grads[0].device
    parts = [g.reshape(-1) if stride <= 1 else g.reshape(-1)[::stride] for g in grads]
    if any(part.device != device for part in parts):  # a model split over devices
        parts = [part.to(device) for part in parts]
    return torch.cat(parts).float()

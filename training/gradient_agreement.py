"""The job's side of gradient agreement (state_schema/gradient_agreement.py): every
AGREEMENT_EVERY updates, one copy of the update's gradients is kept and compared with the
next update's (lag 1) and the fifth's (lag 5), where the next copy is taken.

Cost: at each of those updates, one gather of the gradients into a flat float32 vector and
a dot product; about 2 per AGREEMENT_EVERY updates. Memory: the kept copy, at most
MAX_ELEMENTS values (4 MiB) on the gradients' device: a model with more gradient values is
sampled, every k-th value of each tensor (the same values each time), which estimates the
cosine of the whole. On a GPU nothing is read back at the update it is measured: each
figure goes to the host by a non-blocking copy (debugger/host_copy.py), and is recorded
with the first update that finds the copy done, never waiting for it (an update or two
after its own: the last third's mean does not notice).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

from remedy.debugger.host_copy import HostCopier, HostCopy
from remedy.state_schema.gradient_agreement import AGREEMENT_EVERY, AGREEMENT_FIELDS, LAGS

MAX_ELEMENTS = 1 << 20


class GradientAgreement:
    """Feed it each update (see); it returns the figures ready for that update's step
    record."""

    def __init__(self, every: int = AGREEMENT_EVERY) -> None:
        self.every = every
        self.kept: torch.Tensor | None = None  # the sampled gradients of update kept_at
        self.kept_at = 0
        self.kept_of: tuple[int, ...] = ()  # of which parameters
        self.copier = HostCopier(max_buffers=len(LAGS) * 2)
        self.measured: list[tuple[str, HostCopy]] = []  # on their way to the host

    def see(self, step: int, parameters: Callable[[], Iterable[torch.Tensor]]) -> dict[str, float]:
        """The update `step` (1 for the first), `parameters()` holding its gradients, not
        yet applied (listed only at the updates measured); the figures to record with it
        ({} mostly)."""
        lag = step - self.kept_at
        due = self.kept is not None and lag in LAGS
        keep = step % self.every == 0
        if due or keep:
            with torch.no_grad():
                self.measure(step, list(parameters()), lag if due else None, keep)
        return self.ready() if self.measured else {}

    def measure(
        self, step: int, params: Sequence[torch.Tensor], lag: int | None, keep: bool
    ) -> None:
        with_grads = [p for p in params if p.grad is not None]
        if not with_grads:
            return
        of = tuple(id(p) for p in with_grads)
        current = sampled([p.grad for p in with_grads if p.grad is not None])
        if lag is not None and of == self.kept_of and self.kept is not None:
            similarity = cosine(self.kept, current).reshape(1)
            self.measured.append((AGREEMENT_FIELDS[lag], self.copier.start(similarity)))
        if keep:
            self.kept, self.kept_at, self.kept_of = current, step, of

    def ready(self) -> dict[str, float]:
        """The figures whose copy to the host is complete (a CPU's at once): never waits."""
        figures: dict[str, float] = {}
        waiting: list[tuple[str, HostCopy]] = []
        for name, copy in self.measured:
            if not copy.event.query():
                waiting.append((name, copy))
                continue
            number = float(copy.host[0])
            copy.release()
            if math.isfinite(number):
                figures[name] = number
        self.measured = waiting
        return figures


def sampled(grads: Sequence[torch.Tensor], max_elements: int = MAX_ELEMENTS) -> torch.Tensor:
    """The gradients as one float32 vector on the first one's device: every value, or
    every k-th of each tensor, so that about max_elements are kept (one more at most per
    tensor)."""
    total = sum(g.numel() for g in grads)
    stride = max(1, math.ceil(total / max_elements))
    device = grads[0].device
    parts = [g.detach().reshape(-1)[::stride].to(device, torch.float32) for g in grads]
    return torch.cat(parts)


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of two vectors, on their device (NaN when either is zero)."""
    return torch.dot(a, b) / (torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b))

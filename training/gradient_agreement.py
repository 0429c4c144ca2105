"""The job's side of gradient agreement (state_schema/gradient_agreement.py): every
AGREEMENT_EVERY updates, one copy of the update's gradients is kept and compared with the
next update's (lag 1) and the fifth's (lag 5), where the next copy is taken.

Cost: at each of those updates, one gather of the gradients into a flat float32 vector and
a dot product; about 2 per AGREEMENT_EVERY updates. Memory: the kept copy, at most
MAX_ELEMENTS (training/policy_figures.py) values (4 MiB) on the gradients' device: a model
with more gradient values is sampled, every k-th value of each tensor (the same values each
time), which estimates the cosine of the whole. Sparse gradients are left out. Read back
and guarded as every figure for the policy is (training/policy_figures.py): on a GPU a
figure is recorded with the first update that finds its copy done, an update or two after
its own (the last third's mean does not notice); a failure to measure (a gradient of a
kind torch cannot gather) leaves the verdict no agreement to ask on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from remedy.state_schema.gradient_agreement import AGREEMENT_EVERY, AGREEMENT_FIELDS, LAGS
from remedy.training.policy_figures import (
    MAX_ELEMENTS,
    PolicyFigures,
    on_one_device,
    sampled_parts,
)


class GradientAgreement(PolicyFigures):
    """Feed it each update (see); it returns the figures ready for that update's step
    record."""

    name = "gradient agreement"

    def __init__(self, every: int = AGREEMENT_EVERY, staged: bool = False) -> None:
        """staged: take a device's path (a copy to a host buffer, read once complete) on
        the CPU too, as debugger/host_copy.py's staged does (tests on CPU-only torch)."""
        super().__init__(buffers=len(LAGS) * 2, staged=staged)
        self.every = every
        self.kept: torch.Tensor | None = None  # the sampled gradients of update kept_at
        self.kept_sq = torch.zeros(())  # its squared norm
        self.kept_at = 0
        self.kept_of: tuple[int, ...] = ()  # of which parameters

    def see(self, step: int, parameters: Callable[[], Iterable[torch.Tensor]]) -> dict[str, float]:
        """The update `step` (1 for the first), `parameters()` holding its gradients, not
        yet applied (listed only at the updates measured); the figures to record with it
        ({} mostly)."""
        lag = step - self.kept_at
        due = self.kept is not None and lag in LAGS
        keep = step % self.every == 0
        if due or keep:
            self.take(
                step, lambda: self.measure(step, list(parameters()), lag if due else None, keep)
            )
        return self.ready()

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
            self.publish(AGREEMENT_FIELDS[lag], similarity)
        if keep:
            self.kept, self.kept_sq, self.kept_at, self.kept_of = current, current_sq, step, of


def sampled(grads: Sequence[torch.Tensor], max_elements: int = MAX_ELEMENTS) -> torch.Tensor:
    """The gradients as one float32 vector on the first one's device: every value, or
    every k-th of each tensor, so that about max_elements are kept (one more at most per
    tensor)."""
    return torch.cat(on_one_device(sampled_parts(grads, max_elements))).float()

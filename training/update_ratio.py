"""The job's side of the update ratio (state_schema/update_ratio.py): how far the updates
move the weights, as a fraction of themselves.

Every AGREEMENT_EVERY updates (every SPARSE_EVERY past update DENSE_UNTIL) a copy of the
trained weights is kept; at the next such update, each weight's ||w(now) - w(kept)|| /
||w(kept)||, divided by the updates in between, is taken and the median over the weights
recorded (UPDATE_RATIO_FIELD): the weights' net movement per update, as the TinyUpdates
rule measures it between saved steps. A median, not the whole model's ratio: a frozen or
barely used weight (an embedding of rare tokens, a bias still at zero) does not hide the
rest.

Cost: at each of those updates, one copy of the weights, one subtraction and two norms
per weight (torch's foreach kernels). Memory: the kept copy, at most MAX_ELEMENTS values
(4 MiB) on the weights' device: larger weights are sampled, every k-th value of each (the
same values each time), which estimates each weight's ratio. Sampled, read back and
guarded as every figure for the policy is (training/policy_figures.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from remedy.state_schema.gradient_agreement import AGREEMENT_EVERY
from remedy.state_schema.update_ratio import UPDATE_RATIO_FIELD
from remedy.training.policy_figures import PolicyFigures, on_one_device, sampled_parts

# Every AGREEMENT_EVERY updates up to here (a stall is found early: TinyUpdates at update
# 10), then every SPARSE_EVERY (a long run's later figures add little to its median, and
# each costs about 0.2 ms on a small CPU model: 0.035 ms a step every 5, 0.007 every 25).
DENSE_UNTIL = 100
SPARSE_EVERY = 25


class UpdateRatio(PolicyFigures):
    """Feed it each update (see); it returns the figure ready for that update's step
    record ({} mostly)."""

    name = "update ratio"

    def __init__(self, every: int = AGREEMENT_EVERY, staged: bool = False) -> None:
        """staged: take a device's path on the CPU too (tests on CPU-only torch)."""
        super().__init__(buffers=2, staged=staged)
        self.every = every
        self.kept: list[torch.Tensor] | None = None  # the sampled weights at update kept_at
        self.kept_sizes = torch.zeros(0)  # their norms
        self.kept_at = 0
        self.kept_of: tuple[int, ...] = ()  # of which parameters

    def see(self, step: int, parameters: Callable[[], Iterable[torch.Tensor]]) -> dict[str, float]:
        """The update `step` (1 for the first), `parameters()` the model's parameters
        (listed only at the updates measured)."""
        every = self.every if step <= DENSE_UNTIL else SPARSE_EVERY
        if step % every == 0:
            self.take(step, lambda: self.measure(step, parameters()))
        return self.ready()

    def measure(self, step: int, parameters: Iterable[torch.Tensor]) -> None:
        """Compare the weights with those kept `every` updates ago (where the same
        weights were kept), then keep these."""
        trained = [
            p
            for p in parameters
            if p.requires_grad and p.grad is not None and p.layout == torch.strided
        ]
        if not trained:
            return
        now = sampled_parts(trained)
        sizes = torch.stack(on_one_device(torch._foreach_norm(now))).float()
        of = tuple(id(p) for p in trained)
        if self.kept is not None and of == self.kept_of:
            moved = torch.stack(
                on_one_device(torch._foreach_norm(torch._foreach_sub(now, self.kept)))
            )
            # per update; a weight at zero (a bias not yet moved) has no ratio: nan, passed over
            ratios = torch.where(self.kept_sizes > 0, moved.float() / self.kept_sizes, math.nan)
            self.publish(UPDATE_RATIO_FIELD, torch.nanmedian(ratios) / (step - self.kept_at))
        self.kept, self.kept_sizes = [w.clone() for w in now], sizes
        self.kept_at, self.kept_of = step, of

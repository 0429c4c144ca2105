"""DivergingLoss: the loss climbs far above the best it reached (divergence that stays finite)."""

from __future__ import annotations

import math

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import LossWindowRule
from remedy.debugger.rules.registry import register_rule


@register_rule
class DivergingLoss(LossWindowRule):
    """Fires when the mean loss of a window of `num_steps` saved steps exceeds `factor` x the
    lowest window mean seen so far in the job, or is not finite. `mode`: only that mode's
    losses (default: each mode separately).

    ExplodingTensor only sees NaN and inf; a learning rate above the stability limit often
    drives the loss to 1e10 and keeps it finite, and the job then "completes" at chance
    accuracy. Healthy training noise stays well within a factor of 10 of the best window.
    """

    name = "DivergingLoss"
    num_steps = 5
    factor: float = 10.0

    def validate(self) -> None:
        super().validate()
        if not (math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"{self.name}: parameter 'factor' must be > 1, got {self.factor}")

    def setup(self) -> None:
        super().setup()
        self._best: dict[ModeKeys, float] = {}

    def window_ended(self, step: int, mode: ModeKeys, loss: str, mean: float) -> bool:
        if not math.isfinite(mean):
            message = f"mean {loss} over {self.num_steps} {mode.value} steps is not finite"
            return self.fire(step, mode, loss, f"{message} ({mean}) at step {step}")
        best = self._best.get(mode)
        # A ratio means nothing for a loss that can reach 0 or go negative.
        if best is not None and best > 0 and mean > self.factor * best:
            message = (
                f"mean {loss} over the last {self.num_steps} {mode.value} steps is "
                f"{mean:.4g}, {mean / best:.3g}x its best window mean {best:.4g} "
                f"(> {self.factor:g}x) at step {step}"
            )
            return self.fire(step, mode, loss, message)
        self._best[mode] = mean if best is None else min(best, mean)
        return False

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

    Near 0 a ratio means nothing: a loss that went from 0.0009 back up to 0.18 is 200x its
    best and still a model that predicts well. The best window is therefore floored at
    `min_loss_fraction` x the first window's mean (the barely trained model's loss, about
    ln(classes) for a classifier): with the defaults the loss must climb back to the
    order of the untrained loss, or 10x its best when that is higher. 0 (LEGACY_DEFAULTS)
    restores the plain ratio.
    """

    name = "DivergingLoss"
    num_steps = 5
    LEGACY_DEFAULTS = {"min_loss_fraction": 0.0}
    factor: float = 10.0
    min_loss_fraction: float = 0.1

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
        first = self.first_mean(mode) or 0.0
        reference = None if best is None else max(best, self.min_loss_fraction * first)
        # A ratio means nothing for a loss that can reach 0 or go negative.
        if reference is not None and reference > 0 and mean > self.factor * reference:
            floor = "" if reference == best else f", floored at {reference:.4g}"
            message = (
                f"mean {loss} over the last {self.num_steps} {mode.value} steps is "
                f"{mean:.4g}, {mean / reference:.3g}x its best window mean {best:.4g}"
                f"{floor} (> {self.factor:g}x) at step {step}"
            )
            return self.fire(step, mode, loss, message)
        self._best[mode] = mean if best is None else min(best, mean)
        return False

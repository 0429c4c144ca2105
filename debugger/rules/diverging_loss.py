"""DivergingLoss: the loss climbs far above the best it reached (divergence that stays finite)."""

from __future__ import annotations

import math

from debugger.modes import ModeKeys
from debugger.rules.base import Rule, Windows
from debugger.rules.registry import register_rule


@register_rule
class DivergingLoss(Rule):
    """Fires when the mean loss of a window of `num_steps` saved steps exceeds `factor` x the
    lowest window mean seen so far in the job, or is not finite. `mode`: only that mode's
    losses (default: each mode separately).

    ExplodingTensor only sees NaN and inf; a learning rate above the stability limit often
    drives the loss to 1e10 and keeps it finite, and the job then "completes" at chance
    accuracy. Healthy training noise stays well within a factor of 10 of the best window.
    """

    name = "DivergingLoss"
    num_steps: int = 5
    factor: float = 10.0
    mode: str | None = None

    def validate(self) -> None:
        if self.num_steps < 1:
            raise ValueError(f"{self.name}: parameter 'num_steps' must be >= 1")
        if not (math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"{self.name}: parameter 'factor' must be > 1, got {self.factor}")
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._windows = Windows(self.num_steps)
        self._best: dict[ModeKeys, float] = {}

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if self.mode is not None and mode.value != self.mode:
            return False
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        mean = self._windows.add(mode, loss[1])
        if mean is None:
            return False
        if not math.isfinite(mean):
            message = f"mean {loss[0]} over {self.num_steps} {mode.value} steps is not finite"
            return self.fire(step, mode, loss[0], f"{message} ({mean}) at step {step}")
        best = self._best.get(mode)
        # A ratio means nothing for a loss that can reach 0 or go negative.
        if best is not None and best > 0 and mean > self.factor * best:
            message = (
                f"mean {loss[0]} over the last {self.num_steps} {mode.value} steps is "
                f"{mean:.4g}, {mean / best:.3g}x its best window mean {best:.4g} "
                f"(> {self.factor:g}x) at step {step}"
            )
            return self.fire(step, mode, loss[0], message)
        self._best[mode] = mean if best is None else min(best, mean)
        return False

"""LossNotDecreasing: the loss stops going down."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import LossWindowRule
from remedy.debugger.rules.registry import register_rule


@register_rule
class LossNotDecreasing(LossWindowRule):
    """Compares the mean loss of each window of `num_steps` saved steps with the window
    before it; fires when it fell by less than `diff_percent` % (the message says when it
    rose by more than `increase_threshold_percent` %). `mode`: only that mode's losses
    (default: each mode separately)."""

    name = "LossNotDecreasing"
    num_steps = 10
    diff_percent: float = 0.1
    increase_threshold_percent: float = 5.0

    def setup(self) -> None:
        super().setup()
        self._previous_mean: dict[ModeKeys, float] = {}

    def window_ended(self, step: int, mode: ModeKeys, loss: str, mean: float) -> bool:
        previous = self._previous_mean.get(mode)
        self._previous_mean[mode] = mean
        if previous is None:
            return False
        change = (previous - mean) / abs(previous) * 100.0 if previous else 0.0
        if change >= self.diff_percent:
            return False
        if -change > self.increase_threshold_percent:
            what = f"rose by {-change:.2f}% (> {self.increase_threshold_percent:g}%)"
        else:
            what = f"fell by only {change:.3f}% (< {self.diff_percent:g}%)"
        message = (
            f"mean {loss} over the last {self.num_steps} {mode.value} steps {what} at step {step}"
        )
        return self.fire(step, mode, loss, message)

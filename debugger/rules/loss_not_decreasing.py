"""LossNotDecreasing: the loss stops going down."""

from __future__ import annotations

from debugger.modes import ModeKeys
from debugger.rules.base import Rule, Windows
from debugger.rules.registry import register_rule


@register_rule
class LossNotDecreasing(Rule):
    """Compares the mean loss of each window of `num_steps` saved steps with the window
    before it; fires when it fell by less than `diff_percent` % (the message says when it
    rose by more than `increase_threshold_percent` %). `mode`: only that mode's losses
    (default: each mode separately)."""

    name = "LossNotDecreasing"
    num_steps: int = 10
    diff_percent: float = 0.1
    increase_threshold_percent: float = 5.0
    mode: str | None = None

    def validate(self) -> None:
        if self.num_steps < 1:
            raise ValueError(f"{self.name}: parameter 'num_steps' must be >= 1")
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._windows = Windows(self.num_steps)
        self._previous_mean: dict[ModeKeys, float] = {}

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if self.mode is not None and mode.value != self.mode:
            return False
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        mean = self._windows.add(mode, loss[1])
        if mean is None:
            return False
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
            f"mean {loss[0]} over the last {self.num_steps} {mode.value} steps {what} "
            f"at step {step}"
        )
        return self.fire(step, mode, loss[0], message)

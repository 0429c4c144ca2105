"""LossNotDecreasing: the loss stops going down."""

from __future__ import annotations

import math

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import LossWindowRule
from remedy.debugger.rules.registry import register_rule


@register_rule
class LossNotDecreasing(LossWindowRule):
    """Compares the mean loss of each window of `num_steps` saved steps with the best
    window mean so far; fires when `patience` windows in a row did not beat it by
    `diff_percent` % (the message says when the last one rose by more than
    `increase_threshold_percent` %), unless the loss already fell below
    `converged_fraction` x the first window's mean. `mode`: only that mode's losses
    (default: each mode separately, TRAIN windows against TRAIN, EVAL against EVAL).

    Why not the managed service's defaults (LEGACY_DEFAULTS: windows of 10 compared with
    the window before, once): on healthy runs the loss jumps when a warmup epoch ends (the
    learning rate rises) and a mini-batch loss is noisy, so one window in three "rose".
    Against the best window, a jump counts only if the loss does not recover within
    `patience` windows, and a loss that is already a tenth of where it started has
    converged: nothing is wrong with it not going down further (Overtraining's question).
    """

    name = "LossNotDecreasing"
    LEGACY_DEFAULTS = {"num_steps": 10, "patience": 1, "converged_fraction": 0.0}
    num_steps = 20
    diff_percent: float = 0.1
    increase_threshold_percent: float = 5.0
    patience: int = 5
    converged_fraction: float = 0.1

    def validate(self) -> None:
        super().validate()
        if self.patience < 1:
            raise ValueError(f"{self.name}: parameter 'patience' must be >= 1")

    def setup(self) -> None:
        super().setup()
        self._best: dict[ModeKeys, float] = {}
        self._previous_mean: dict[ModeKeys, float] = {}
        self._stale: dict[ModeKeys, int] = {}

    def window_ended(self, step: int, mode: ModeKeys, loss: str, mean: float) -> bool:
        best = self._best.get(mode)
        previous = self._previous_mean.get(mode)
        self._previous_mean[mode] = mean
        if (
            best is None
            or not math.isfinite(best)
            or (mean < best - abs(best) * self.diff_percent / 100.0)
        ):
            self._best[mode], self._stale[mode] = mean, 0
            return False
        self._stale[mode] += 1
        first = self.first_mean(mode)
        converged = first is not None and first > 0 and mean < self.converged_fraction * first
        if self._stale[mode] < self.patience or converged:
            return False
        # The numbers the message gives are the ones judged: the last window against the
        # best (diff_percent), and its rise from the window before (increase_threshold).
        from_best = (mean - best) / abs(best) * 100.0 if best else 0.0
        rise = (mean - previous) / abs(previous) * 100.0 if previous else 0.0
        rose = (
            f"; it rose {rise:.2f}% from the window before (> {self.increase_threshold_percent:g}%)"
            if rise > self.increase_threshold_percent
            else ""
        )
        message = (
            f"mean {loss} over windows of {self.num_steps} {mode.value} steps has not fallen "
            f"{self.diff_percent:g}% below its best {best:.4g} for {self._stale[mode]} windows: "
            f"the last, {mean:.4g}, is {from_best:+.3g}% from it{rose}, at step {step}"
        )
        return self.fire(step, mode, loss, message)

"""SaturatedActivation: tanh/sigmoid inputs sit where the function is flat."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex, unit_fraction
from remedy.debugger.rules.registry import register_rule


@register_rule
class SaturatedActivation(Rule):
    """A unit is saturated when its input lies inside the (min, max) band for less than
    `threshold_inactivity` % of the batch; fires when more than `threshold_layer` % of a
    layer's units are saturated. Bounds are the documented ones."""

    name = "SaturatedActivation"
    tanh_regex: str = ".*tanh_input"
    sigmoid_regex: str = ".*sigmoid_input"
    tanh_min: float = -9.4999
    tanh_max: float = 9.4999
    sigmoid_min: float = -23.0
    sigmoid_max: float = 16.99999
    threshold_inactivity: float = 1.0
    threshold_layer: float = 50.0

    def validate(self) -> None:
        check_regex(self.name, "tanh_regex", self.tanh_regex)
        check_regex(self.name, "sigmoid_regex", self.sigmoid_regex)

    def _bands(self, step: int, mode: ModeKeys) -> list[tuple[str, float, float]]:
        tanh = self.select(step, mode, None, self.tanh_regex)
        sigmoid = self.select(step, mode, None, self.sigmoid_regex)
        return [(n, self.tanh_min, self.tanh_max) for n in tanh] + [
            (n, self.sigmoid_min, self.sigmoid_max) for n in sigmoid
        ]

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return [name for name, _, _ in self._bands(step, mode)]

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name, low, high in self._bands(step, mode):
            value = self.value(name, step, mode)
            active = unit_fraction((value > low) & (value < high)) * 100.0
            if active.size == 0:
                continue
            saturated = float(np.mean(active < self.threshold_inactivity) * 100.0)
            if saturated > self.threshold_layer:
                message = (
                    f"{name}: {saturated:.1f}% of {active.size} units saturated "
                    f"(> {self.threshold_layer:g}%) at {mode.value} step {step}"
                )
                return self.fire(step, mode, name, message)
        return False

"""DeadRelu: too many ReLU units of a layer are (almost) never active."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex, unit_fraction
from remedy.debugger.rules.registry import register_rule


@register_rule
class DeadRelu(Rule):
    """A unit (feature/channel) is dead when it is active (> 0) for less than
    `threshold_inactivity` % of the batch; fires when more than `threshold_layer` % of a
    layer's units are dead."""

    name = "DeadRelu"
    tensor_regex: str = ".*relu_output"
    threshold_inactivity: float = 1.0
    threshold_layer: float = 50.0

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.tensor_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name in self.required_tensors(step, mode):
            active = unit_fraction(self.value(name, step, mode) > 0) * 100.0
            if active.size == 0:
                continue
            dead = float(np.mean(active < self.threshold_inactivity) * 100.0)
            if dead > self.threshold_layer:
                message = (
                    f"{name}: {dead:.1f}% of {active.size} units dead "
                    f"(> {self.threshold_layer:g}%) at {mode.value} step {step}"
                )
                return self.fire(step, mode, name, message)
        return False

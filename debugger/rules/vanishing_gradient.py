"""VanishingGradient: the mean absolute value of a gradient falls below a threshold."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class VanishingGradient(Rule):
    """Fires at the first step where a gradient's mean |value| is below `threshold`."""

    name = "VanishingGradient"
    threshold: float = 1e-7
    collection_names: list[str] | None = ["gradients"]
    tensor_regex: str | None = None

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex, everything=False)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name in self.required_tensors(step, mode):
            mean = self.reduction(name, step, mode, "mean", abs=True)
            if mean < self.threshold:
                message = (
                    f"{name}: mean |gradient| {mean:.3g} < {self.threshold:g} "
                    f"at {mode.value} step {step}"
                )
                return self.fire(step, mode, name, message)
        return False

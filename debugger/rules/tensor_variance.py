"""TensorVariance: a tensor's variance leaves the allowed band."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class TensorVariance(Rule):
    """Fires when a selected tensor's variance is above max_threshold or below
    min_threshold (at least one must be set). Uses the saved "variance" reduction when the
    hook saved reductions only."""

    name = "TensorVariance"
    max_threshold: float | None = None
    min_threshold: float | None = None
    collection_names: list[str] | None = None
    tensor_regex: str | None = None

    def validate(self) -> None:
        if self.max_threshold is None and self.min_threshold is None:
            raise ValueError(f"{self.name}: set 'max_threshold' or 'min_threshold'")
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name in self.required_tensors(step, mode):
            variance = self.reduction(name, step, mode, "variance")
            too_high = self.max_threshold is not None and variance > self.max_threshold
            too_low = self.min_threshold is not None and variance < self.min_threshold
            if too_high or too_low:
                bound = f"> {self.max_threshold:g}" if too_high else f"< {self.min_threshold:g}"
                message = f"{name}: variance {variance:.4g} {bound} at {mode.value} step {step}"
                return self.fire(step, mode, name, message)
        return False

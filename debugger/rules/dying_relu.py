"""DyingRelu (AUTOTRAINER): most gradient entries are exactly zero."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.progress import LossProgress
from remedy.debugger.rules.registry import register_rule


@register_rule
class DyingRelu(Rule):
    """Fires when the share of exactly-zero entries over all selected gradients of a step
    is at least `threshold` (AUTOTRAINER: 0.7); the gradient-side view of dead ReLUs, so it
    needs no activations saved. As AUTOTRAINER, only while the model has not learned:
    its TRAIN loss is not `min_progress` (10 %) below its first (rules/progress.py; a
    healthy ReLU network's gradients are sparse too). None (LEGACY_DEFAULTS): always."""

    name = "DyingRelu"
    LEGACY_DEFAULTS = {"min_progress": None}
    threshold: float = 0.7
    min_progress: float | None = 0.1
    collection_names: list[str] | None = ["gradients"]
    tensor_regex: str | None = None

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex, everything=False)

    def setup(self) -> None:
        self._progress = LossProgress(self, self.min_progress)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        self._progress.update(step, mode)
        if self._progress.learning():
            return False
        names = self.required_tensors(step, mode)
        zeros = total = 0
        for name in names:
            value = self.value(name, step, mode)
            zeros += int(np.count_nonzero(value == 0))
            total += value.size
        if total and zeros / total >= self.threshold:
            message = (
                f"{zeros / total:.0%} of {total} gradient entries are exactly zero "
                f"(>= {self.threshold:.0%}) at {mode.value} step {step}"
            )
            return self.fire(step, mode, None, message)
        return False

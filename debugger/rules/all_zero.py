"""AllZero: a tensor is (almost) all zeros."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class AllZero(Rule):
    """Fires when at least `threshold` % of a selected tensor's values are zero."""

    name = "AllZero"
    collection_names: list[str] | None = None
    tensor_regex: str | None = None
    threshold: float = 100.0

    def validate(self) -> None:
        if self.collection_names is None and self.tensor_regex is None:
            raise ValueError(f"{self.name}: set 'collection_names' or 'tensor_regex'")
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name in self.required_tensors(step, mode):
            value = self.value(name, step, mode)
            if value.size == 0:
                continue
            zeros = float(np.count_nonzero(value == 0) / value.size * 100.0)
            if zeros >= self.threshold:
                message = f"{name}: {zeros:.1f}% zeros at {mode.value} step {step}"
                return self.fire(step, mode, name, message)
        return False

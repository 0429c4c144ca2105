"""ExplodingTensor: a tensor holds NaN (or, unless only_nan, +-inf)."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class ExplodingTensor(Rule):
    """Fires at the first step where a selected tensor holds a non-finite value.

    Tensors are selected by collection and/or by regex (re.match against the full name,
    e.g. ".*gradient" selects "gradient/fc.weight"); with neither, every tensor is checked.
    """

    name = "ExplodingTensor"
    collection_names: list[str] | None = None
    tensor_regex: str | None = None
    only_nan: bool = False

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name in self._selected(step, mode):
            value = self.trial.tensor(name).value(step, mode)
            if not np.issubdtype(value.dtype, np.inexact):
                continue  # integer/bool tensors cannot hold NaN or inf
            nan = int(np.isnan(value).sum())
            inf = 0 if self.only_nan else int(np.isinf(value).sum())
            if nan or inf:
                held = f"{nan} NaN" if self.only_nan else f"{nan} NaN and {inf} inf"
                return self.fire(
                    step,
                    mode,
                    name,
                    f"{name} holds {held} of {value.size} values at {mode.value} step {step}",
                )
        return False

    def _selected(self, step: int, mode: ModeKeys) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self._selected(step, mode)

"""ExplodingTensor: a tensor holds NaN (or, unless only_nan, +-inf)."""

from __future__ import annotations

import re

import numpy as np

from debugger.modes import ModeKeys
from debugger.rules.base import Rule
from debugger.rules.registry import register_rule


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
        if self.tensor_regex is not None:
            try:
                re.compile(self.tensor_regex)
            except re.error as exc:
                message = f"{self.name}: parameter 'tensor_regex' is not a valid regex: {exc}"
                raise ValueError(message) from None

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
        if self.collection_names is None and self.tensor_regex is None:
            return self.trial.tensor_names(mode=mode, step=step)
        names: set[str] = set()
        for collection in self.collection_names or []:
            names.update(self.trial.tensor_names(collection=collection, mode=mode, step=step))
        if self.tensor_regex is not None:
            names.update(self.trial.tensor_names(regex=self.tensor_regex, mode=mode, step=step))
        return sorted(names)

"""UnchangedTensor: a tensor stays the same over several saved steps."""

from __future__ import annotations

from collections import deque

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class UnchangedTensor(Rule):
    """Fires when a selected tensor is allclose(rtol, atol, equal_nan) over its last
    `num_steps` saved steps of a mode. Keeps num_steps - 1 copies of each tensor.

    Judges the weights in TRAIN mode by default (`collection_names` None and `mode` None,
    LEGACY_DEFAULTS: every tensor saved, every mode). Many tensors are unchanged on every
    healthy run: the labels and inputs of the same test set at each evaluation, the
    weights between the EVAL steps of one evaluation, and the bias (and its zero gradient)
    of a convolution followed by batch norm, which the norm cancels. A model that does not
    learn shows in its weights while it trains."""

    name = "UnchangedTensor"
    num_steps: int = 3
    rtol: float = 1e-5
    atol: float = 1e-8
    equal_nan: bool = False
    LEGACY_DEFAULTS = {"collection_names": None, "mode": None}
    collection_names: list[str] | None = ["weights"]
    tensor_regex: str | None = None
    mode: str | None = "TRAIN"

    def validate(self) -> None:
        if self.num_steps < 2:
            raise ValueError(f"{self.name}: parameter 'num_steps' must be >= 2")
        check_regex(self.name, "tensor_regex", self.tensor_regex)
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._history: dict[tuple[ModeKeys, str], deque[np.ndarray]] = {}

    def _same(self, old: np.ndarray, new: np.ndarray) -> bool:
        return old.shape == new.shape and bool(
            np.allclose(old, new, rtol=self.rtol, atol=self.atol, equal_nan=self.equal_nan)
        )

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if self.mode is not None and mode.value != self.mode:
            return False
        for name in self.required_tensors(step, mode):
            value = self.value(name, step, mode)
            history = self._history.setdefault((mode, name), deque(maxlen=self.num_steps - 1))
            full = len(history) == self.num_steps - 1
            unchanged = full and all(self._same(old, value) for old in history)
            history.append(value)
            if unchanged:
                message = f"{name} unchanged over {self.num_steps} {mode.value} steps to {step}"
                return self.fire(step, mode, name, message)
        return False

"""PoorWeightInitialization: the first steps show badly scaled activations or no progress."""

from __future__ import annotations

import numpy as np
from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class PoorWeightInitialization(Rule):
    """Checked during the first `steps` TRAIN steps only. Fires when
    - the variances of the activation inputs differ across layers by more than `threshold`
      (max/min), or
    - some layer's activation inputs are squeezed: 95th - 5th percentile < distribution_range,
      or
    - the loss did not decrease for `patience` steps in a row."""

    name = "PoorWeightInitialization"
    READS = (reads.LOSSES,)  # and the activation inputs its regex selects
    activation_inputs_regex: str = ".*relu_input"
    threshold: float = 10.0
    distribution_range: float = 0.001
    patience: int = 5
    steps: int = 10

    def setup(self) -> None:
        self._best_loss: float | None = None
        self._stale = 0

    def validate(self) -> None:
        check_regex(self.name, "activation_inputs_regex", self.activation_inputs_regex)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.activation_inputs_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if mode is not ModeKeys.TRAIN or step >= self.steps:
            return False
        variances: dict[str, float] = {}
        for name in self.required_tensors(step, mode):
            value = np.asarray(self.value(name, step, mode), dtype=np.float64)
            variances[name] = float(value.var())
            p5, p95 = np.percentile(value, [5, 95])
            if p95 - p5 < self.distribution_range:
                message = (
                    f"{name}: 5-95th percentile range {p95 - p5:.3g} < "
                    f"{self.distribution_range:g} at step {step}"
                )
                return self.fire(step, mode, name, message)
        if len(variances) >= 2:
            low, high = min(variances.values()), max(variances.values())
            ratio = np.inf if low == 0 else high / low
            if ratio > self.threshold:
                worst = max(variances, key=variances.__getitem__)
                message = (
                    f"activation input variance differs {ratio:.3g}x across layers "
                    f"(> {self.threshold:g}) at step {step}"
                )
                return self.fire(step, mode, worst, message)
        loss = self.loss_at(step, mode)
        if loss is not None:
            if self._best_loss is None or loss[1] < self._best_loss:
                self._best_loss, self._stale = loss[1], 0
            else:
                self._stale += 1
                if self._stale >= self.patience:
                    message = f"loss has not decreased for {self._stale} steps at step {step}"
                    return self.fire(step, mode, loss[0], message)
        return False

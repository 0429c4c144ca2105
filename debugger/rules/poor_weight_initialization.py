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
      per layer (`per_layer`: (max/min) ** (1 / (layers - 1)), the geometric mean growth
      from one layer to the next; otherwise max/min), or
    - some layer's activation inputs are squeezed: 95th - 5th percentile < distribution_range,
      or
    - the loss stayed at or above the first step's loss (less than `min_decrease_percent` %
      below it) for `patience` steps in a row: nothing was learnt from the start.

    Why not "the loss did not beat its best for `patience` steps" (LEGACY_DEFAULTS): a
    healthy He-initialised network drops from its first loss (4.0 for ten classes) to
    about ln(10) in three updates and then moves by mini-batch noise for a while, so its
    best of step 3 stands for five steps on most healthy runs. And a residual network's
    stream adds each block's output to its input, so its variance doubles block by block
    by design: 89x from the first to the last activation of a healthy He-initialised
    ReLU ResNet-8 (2.1x a layer), 500x in a ResNet-20. Unscaled weights multiply it by
    their fan-in a layer (16x for N(0, 1) weights on 32 inputs): hence the limit of 10x
    applies a layer, not overall (LEGACY_DEFAULTS)."""

    name = "PoorWeightInitialization"
    READS = (reads.LOSSES,)  # and the activation inputs its regex selects
    activation_inputs_regex: str = ".*relu_input"
    threshold: float = 10.0
    per_layer: bool = True
    distribution_range: float = 0.001
    patience: int = 5
    steps: int = 10
    LEGACY_DEFAULTS = {"against_first": False, "per_layer": False}
    against_first: bool = True
    min_decrease_percent: float = 1.0

    def setup(self) -> None:
        self._best_loss: float | None = None
        self._first_loss: float | None = None
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
            if self.per_layer and np.isfinite(ratio):
                ratio = ratio ** (1.0 / (len(variances) - 1))
            if ratio > self.threshold:
                worst = max(variances, key=variances.__getitem__)
                what = "a layer on average" if self.per_layer else "across layers"
                message = (
                    f"activation input variance differs {ratio:.3g}x {what} "
                    f"(> {self.threshold:g}) at step {step}"
                )
                return self.fire(step, mode, worst, message)
        loss = self.loss_at(step, mode)
        if loss is not None and self.against_first:
            if self._first_loss is None:
                self._first_loss = loss[1]
            elif loss[1] < self._first_loss * (1 - self.min_decrease_percent / 100):
                self._stale = 0  # (a positive first loss: losses here are >= 0)
            else:
                self._stale += 1
                if self._stale >= self.patience:
                    message = (
                        f"loss {loss[1]:.4g} is not below the first step's {self._first_loss:.4g} "
                        f"for {self._stale} steps at step {step}"
                    )
                    return self.fire(step, mode, loss[0], message)
        elif loss is not None:
            if self._best_loss is None or loss[1] < self._best_loss:
                self._best_loss, self._stale = loss[1], 0
            else:
                self._stale += 1
                if self._stale >= self.patience:
                    message = f"loss has not decreased for {self._stale} steps at step {step}"
                    return self.fire(step, mode, loss[0], message)
        return False

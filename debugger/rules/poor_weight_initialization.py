"""PoorWeightInitialization: the first steps show badly scaled activations or no progress."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class PoorWeightInitialization(Rule):
    """Checked during the first `steps` TRAIN steps only: what the initial weights decide,
    the signal forward (activations) and backward (gradients) through the layers. Fires when
    - the variances of the activation inputs differ across layers by more than `threshold`
      per layer (`per_layer`: (max/min) ** (1 / (layers - 1)), the geometric mean growth
      from one layer to the next; otherwise max/min), or
    - some layer's activation inputs are squeezed: 95th - 5th percentile < distribution_range,
      or
    - the mean squares of the weight gradients (biases skipped) differ across layers by more
      than `gradient_threshold` per layer (as `per_layer`): the backward signal vanishes or
      explodes through the depth (Glorot and Bengio's criterion for an initialisation), or
    - with `judge_loss`, the loss stayed at or above the first step's loss (less than
      `min_decrease_percent` % below it) for `patience` steps in a row.

    Why not the loss by default (LEGACY_DEFAULTS judge it, against the best loss): how far
    the loss falls in the first steps is the learning rate's doing as much as the init's.
    A warmup at a small rate moves a healthy, well-initialised network's loss by less than
    1 % in 5 steps (4 of the 12 healthy runs of benchmarks/rule_quality.py), and a learning
    rate far too small stalls a good init too (TinyUpdates judges that). The gradient check
    sees what the loss was meant to: 12 sigmoid layers at PyTorch's default init shrink the
    gradient's mean square 48x a layer at step 0; healthy MLPs, with or without batch norm,
    and LSTM language models stay below 4x.

    Why per layer: a residual network's stream adds each block's output to its input, so its
    variance doubles block by block by design: 89x from the first to the last activation of
    a healthy He-initialised ReLU ResNet-8 (2.1x a layer), 500x in a ResNet-20. Unscaled
    weights multiply it by their fan-in a layer (16x for N(0, 1) weights on 32 inputs):
    hence the limit of 10x applies a layer, not overall (LEGACY_DEFAULTS)."""

    name = "PoorWeightInitialization"
    READS = (reads.LOSSES, reads.GRADIENTS)  # and the activation inputs its regex selects
    activation_inputs_regex: str = ".*relu_input"
    threshold: float = 10.0
    per_layer: bool = True
    distribution_range: float = 0.001
    patience: int = 5
    steps: int = 10
    LEGACY_DEFAULTS = {
        "against_first": False,
        "per_layer": False,
        "gradient_threshold": None,
        "judge_loss": True,
    }
    gradient_threshold: float | None = 10.0
    judge_loss: bool = False
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
        spread = self._spread(variances)
        if spread is not None and spread[0] > self.threshold:
            message = (
                f"activation input variance differs {spread[0]:.3g}x {self._what()} "
                f"(> {self.threshold:g}) at step {step}"
            )
            return self.fire(step, mode, spread[1], message)
        if self.gradient_threshold is not None:
            squares = {
                name: float(np.mean(np.square(self.value(name, step, mode), dtype=np.float64)))
                for name in self.select(step, mode, ["gradients"], None, everything=False)
                if not name.rsplit(".", 1)[-1].startswith("bias")  # bias_ih_l0 too
            }
            spread = self._spread(squares)
            if spread is not None and spread[0] > self.gradient_threshold:
                message = (
                    f"weight gradient mean square differs {spread[0]:.3g}x {self._what()} "
                    f"(> {self.gradient_threshold:g}) at step {step}"
                )
                return self.fire(step, mode, spread[1], message)
        loss = self.loss_at(step, mode) if self.judge_loss else None
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

    def _spread(self, values: dict[str, float]) -> tuple[float, str] | None:
        """(max/min across layers, per layer when `per_layer`; the largest's name), or None
        for fewer than two layers."""
        if len(values) < 2:
            return None
        low, high = min(values.values()), max(values.values())
        ratio = np.inf if low == 0 else high / low
        if self.per_layer and np.isfinite(ratio):
            ratio = ratio ** (1.0 / (len(values) - 1))
        return float(ratio), max(values, key=values.__getitem__)

    def _what(self) -> str:
        return "a layer on average" if self.per_layer else "across layers"

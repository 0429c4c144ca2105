"""VanishingGradient: the mean absolute value of a gradient falls below a threshold."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.progress import LossProgress
from remedy.debugger.rules.registry import register_rule


@register_rule
class VanishingGradient(Rule):
    """Fires when a gradient's mean |value| is below `threshold` at `patience` saved steps
    of a mode in a row. `skip_biases`: bias gradients (names ending in "bias") are not
    judged.

    Why (LEGACY_DEFAULTS: any gradient, once): the bias of a convolution followed by batch
    norm gets a gradient of ~1e-8 on every healthy run, because the norm subtracts the
    channel mean and with it the bias: it is legitimately ~0. When gradients really vanish
    the weights' gradients vanish too, so the weights are what is judged. And as
    AUTOTRAINER counts a gradient problem only when training is not progressing, one
    small value (a layer at step 0) is not enough: it must stay small, and only while the
    model has not learned: its TRAIN loss is not `min_progress` (10 %) below its first
    (rules/progress.py; a model near its optimum has small gradients by right). None
    (LEGACY_DEFAULTS): judge the gradients alone.
    """

    name = "VanishingGradient"
    LEGACY_DEFAULTS = {"patience": 1, "skip_biases": False, "min_progress": None}
    threshold: float = 1e-7
    collection_names: list[str] | None = ["gradients"]
    tensor_regex: str | None = None
    patience: int = 3
    skip_biases: bool = True
    min_progress: float | None = 0.1

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)
        if self.patience < 1:
            raise ValueError(f"{self.name}: parameter 'patience' must be >= 1")

    def setup(self) -> None:
        self._small: dict[tuple[ModeKeys, str], int] = {}
        self._progress = LossProgress(self, self.min_progress)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        names = self.select(step, mode, self.collection_names, self.tensor_regex, everything=False)
        if self.skip_biases:
            names = [name for name in names if not name.endswith("bias")]
        return names

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        self._progress.update(step, mode)
        if self._progress.learning():
            self._small.clear()
            return False
        for name in self.required_tensors(step, mode):
            mean = self.reduction(name, step, mode, "mean", abs=True)
            key = (mode, name)
            self._small[key] = self._small.get(key, 0) + 1 if mean < self.threshold else 0
            if self._small[key] >= self.patience:
                message = (
                    f"{name}: mean |gradient| {mean:.3g} < {self.threshold:g} at "
                    f"{self._small[key]} saved {mode.value} steps in a row (step {step})"
                )
                return self.fire(step, mode, name, message)
        return False

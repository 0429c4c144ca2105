"""Overfit: the validation loss pulls away from the training loss."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule


@register_rule
class Overfit(Rule):
    """At each EVAL step from `start_step` (EVAL step number): ratio = (eval loss - latest
    TRAIN loss) / latest TRAIN loss; fires when ratio > ratio_threshold at `patience`
    EVAL steps in a row."""

    name = "Overfit"
    READS = (reads.LOSSES,)
    start_step: int = 0
    patience: int = 1
    ratio_threshold: float = 0.1

    def setup(self) -> None:
        self._train_loss: float | None = None
        self._over = 0

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        if mode is ModeKeys.TRAIN:
            self._train_loss = loss[1]
            return False
        if mode is not ModeKeys.EVAL or step < self.start_step or not self._train_loss:
            return False
        ratio = (loss[1] - self._train_loss) / abs(self._train_loss)
        self._over = self._over + 1 if ratio > self.ratio_threshold else 0
        if self._over >= self.patience:
            message = (
                f"eval loss {loss[1]:.4g} vs train loss {self._train_loss:.4g}: ratio "
                f"{ratio:.3g} > {self.ratio_threshold:g} for {self._over} EVAL steps (step {step})"
            )
            return self.fire(step, mode, loss[0], message)
        return False

"""Overtraining: the losses stopped improving, so further training is wasted."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule


@register_rule
class Overtraining(Rule):
    """Fires when the TRAIN loss has not improved on its best by more than `delta` for
    `patience_train` saved steps, or the EVAL loss for `patience_validation` steps."""

    name = "Overtraining"
    READS = (reads.LOSSES,)
    patience_train: int = 5
    patience_validation: int = 10
    delta: float = 0.01

    def setup(self) -> None:
        self._best: dict[ModeKeys, float] = {}
        self._stale: dict[ModeKeys, int] = {}

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        patience = {ModeKeys.TRAIN: self.patience_train, ModeKeys.EVAL: self.patience_validation}
        if mode not in patience:
            return False
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        best = self._best.get(mode)
        if best is None or loss[1] < best - self.delta:
            self._best[mode], self._stale[mode] = loss[1], 0
            return False
        self._stale[mode] += 1
        if self._stale[mode] >= patience[mode]:
            message = (
                f"{mode.value} loss has not improved by more than {self.delta:g} on its best "
                f"{best:.4g} for {self._stale[mode]} steps (step {step})"
            )
            return self.fire(step, mode, loss[0], message)
        return False

"""Overtraining: the losses stopped improving, so further training is wasted."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule


@register_rule
class Overtraining(Rule):
    """Fires when the TRAIN loss (the mean of each window of `num_steps` saved steps) has
    not fallen below (1 - `delta`) x its best for `patience_train` windows in a row, or the
    EVAL loss (the mean of each evaluation: EVAL steps between TRAIN phases) for
    `patience_validation` evaluations.

    Why (LEGACY_DEFAULTS: single saved steps, an absolute delta of 0.01): five noisy
    mini-batch losses in a row above the best one happen on every healthy run, and once a
    loss is below 0.01 an absolute improvement of 0.01 is impossible. Windows average the
    noise out, a relative delta works at any loss scale, and the patience spans 200 saved
    TRAIN steps by default.
    """

    name = "Overtraining"
    READS = (reads.LOSSES,)
    LEGACY_DEFAULTS = {"num_steps": 1, "patience_train": 5, "relative": False}
    num_steps: int = 20
    patience_train: int = 10
    patience_validation: int = 10
    delta: float = 0.01
    relative: bool = True

    def validate(self) -> None:
        if self.num_steps < 1:
            raise ValueError(f"{self.name}: parameter 'num_steps' must be >= 1")

    def setup(self) -> None:
        self._best: dict[ModeKeys, float] = {}
        self._stale: dict[ModeKeys, int] = {}
        self._train: list[float] = []
        self._eval: list[float] = []

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if mode not in (ModeKeys.TRAIN, ModeKeys.EVAL):
            return False
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        if mode is ModeKeys.TRAIN:
            if self._eval:  # the evaluation before this TRAIN step ended
                if self._judge(ModeKeys.EVAL, sum(self._eval) / len(self._eval)):
                    return self.fire(step, mode, loss[0], self._message(ModeKeys.EVAL, step))
                self._eval.clear()
            self._train.append(loss[1])
            if len(self._train) < self.num_steps:
                return False
            mean = sum(self._train) / len(self._train)
            self._train.clear()
            if self._judge(ModeKeys.TRAIN, mean):
                return self.fire(step, mode, loss[0], self._message(mode, step))
            return False
        self._eval.append(loss[1])
        return False

    def _judge(self, mode: ModeKeys, mean: float) -> bool:
        """Record one window (TRAIN) or evaluation (EVAL) mean; True when patience ran out."""
        best = self._best.get(mode)
        margin = self.delta * abs(best) if best is not None and self.relative else self.delta
        if best is None or mean < best - margin:
            self._best[mode], self._stale[mode] = mean, 0
            return False
        self._stale[mode] += 1
        patience = self.patience_train if mode is ModeKeys.TRAIN else self.patience_validation
        return self._stale[mode] >= patience

    def _message(self, mode: ModeKeys, step: int) -> str:
        what = f"windows of {self.num_steps} steps" if mode is ModeKeys.TRAIN else "evaluations"
        delta = f"{self.delta:.0%}" if self.relative else f"{self.delta:g}"
        return (
            f"{mode.value} loss has not improved by more than {delta} on its best "
            f"{self._best[mode]:.4g} for {self._stale[mode]} {what} (step {step})"
        )

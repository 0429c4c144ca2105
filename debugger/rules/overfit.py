"""Overfit: the validation loss pulls away from the training loss."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule


@register_rule
class Overfit(Rule):
    """Judges each evaluation (the EVAL steps between two TRAIN phases, from EVAL step
    `start_step`): its mean loss against the mean TRAIN loss since the evaluation before,
    ratio = (eval - train) / max(train, `min_loss_fraction` x the first TRAIN losses' mean).
    An evaluation is overfit when ratio > `ratio_threshold` and its loss is above the best
    evaluation's before it; fires at `patience` overfit evaluations in a row.

    Why (LEGACY_DEFAULTS: the eval loss against the last TRAIN step's loss, once): one
    mini-batch loss is noise, and near 0 the ratio is meaningless (train 0.005, eval 0.03
    is "5x" on a model at 99 % test accuracy), hence the mean and the floor; and when a
    warmup epoch ends the batch norm statistics lag the weights, so one evaluation's loss
    can jump while training is fine: overfitting is a validation loss that keeps getting
    worse while the gap stays open.
    """

    name = "Overfit"
    READS = (reads.LOSSES,)
    LEGACY_DEFAULTS = {"patience": 1, "min_loss_fraction": 0.0, "only_when_worse": False}
    start_step: int = 0
    patience: int = 2
    ratio_threshold: float = 0.1
    min_loss_fraction: float = 0.1
    only_when_worse: bool = True

    def validate(self) -> None:
        if self.patience < 1:
            raise ValueError(f"{self.name}: parameter 'patience' must be >= 1")

    def setup(self) -> None:
        self._train: list[float] = []  # TRAIN losses since the last evaluation
        self._train_mean: float | None = None  # of the TRAIN phase before this evaluation
        self._first_train: float | None = None
        self._eval: list[float] = []  # the current evaluation's losses
        self._best_eval: float | None = None  # of the evaluations before this one
        self._streak = 0  # overfit evaluations in a row, before the current one
        self._current_over = False

    def _close_evaluation(self) -> None:
        if not self._eval:
            return
        mean = sum(self._eval) / len(self._eval)
        self._streak = self._streak + 1 if self._current_over else 0
        self._best_eval = mean if self._best_eval is None else min(self._best_eval, mean)
        self._eval.clear()
        self._current_over = False

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        if mode is ModeKeys.TRAIN:
            self._close_evaluation()
            self._train.append(loss[1])
            if self._first_train is None and len(self._train) >= 10:
                self._first_train = sum(self._train) / len(self._train)
            return False
        if mode is not ModeKeys.EVAL or step < self.start_step:
            return False
        if not self._eval and self._train:  # a new evaluation: its TRAIN phase ended
            self._train_mean = sum(self._train) / len(self._train)
            if self._first_train is None:
                self._first_train = self._train_mean
            self._train.clear()
        if self._train_mean is None:
            return False
        self._eval.append(loss[1])
        mean = sum(self._eval) / len(self._eval)
        scale = max(abs(self._train_mean), self.min_loss_fraction * (self._first_train or 0.0))
        if scale == 0:
            return False
        ratio = (mean - self._train_mean) / scale
        # The first evaluation has nothing to be worse than (after a warmup epoch the
        # batch norm statistics often lag): overfitting is judged from the second on.
        worse = self._best_eval is not None and mean > self._best_eval
        self._current_over = ratio > self.ratio_threshold and (worse or not self.only_when_worse)
        over = self._streak + 1 if self._current_over else 0
        if over >= self.patience:
            message = (
                f"eval loss {mean:.4g} vs train loss {self._train_mean:.4g}: ratio "
                f"{ratio:.3g} > {self.ratio_threshold:g} for {over} evaluations "
                f"(EVAL step {step})"
            )
            return self.fire(step, mode, loss[0], message)
        return False

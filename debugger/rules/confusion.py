"""Confusion: the confusion matrix is far from diagonal."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.class_imbalance import class_ids
from remedy.debugger.rules.registry import register_rule


@register_rule
class Confusion(Rule):
    """Accumulates the confusion matrix of labels vs predictions over the steps of `mode`
    (default EVAL) and fires when, in the row-normalised matrix, a diagonal entry is below
    `min_diag` or an off-diagonal entry above `max_off_diag`.

    By default (LEGACY_DEFAULTS: the matrix of every step since the first, once) the
    matrix is that of one evaluation (the steps of `mode` between two steps of another
    mode), judged only when the evaluation's accuracy is at least `min_accuracy`, and it
    fires when the same class is confused in `patience` evaluations in a row. A model
    that has not learned yet confuses every class (a healthy run's first evaluations, and
    with the legacy matrix those stay in it for the whole run): a class confused while
    the model gets most samples right is the finding. `min_diag` 0.5 and `max_off_diag`
    0.3 (LEGACY_DEFAULTS: 0.9 and 0.1): with 50 test samples a class, a class at 0.85
    on a model at 97 % accuracy is sampling noise, not confusion; less than half right,
    or a third taken for another class, is.

    And only once the model has stopped learning: an evaluation whose accuracy is more
    than `learning_sigmas` standard errors (sqrt(a (1 - a) / samples), the sampling noise
    of an accuracy a) above the previous evaluation's is not judged. While a model
    learns, its classes come at different times (a ReLU ResNet at 72 % and then 78 % has
    one class at 35 % and then another at 47 %, and ends at 94 % with none below 70 %);
    a class confused in the evaluations after the accuracy stopped rising stays
    confused. 0 judges every evaluation."""

    name = "Confusion"
    min_diag: float = 0.5
    max_off_diag: float = 0.3
    labels_regex: str = ".*labels"
    predictions_regex: str = ".*predictions"
    mode: str | None = "EVAL"
    LEGACY_DEFAULTS = {
        "min_diag": 0.9,
        "max_off_diag": 0.1,
        "per_evaluation": False,
        "min_accuracy": 0.0,
        "patience": 1,
        "learning_sigmas": 0.0,
    }
    per_evaluation: bool = True
    min_accuracy: float = 0.5
    patience: int = 2
    learning_sigmas: float = 2.0

    def validate(self) -> None:
        check_regex(self.name, "labels_regex", self.labels_regex)
        check_regex(self.name, "predictions_regex", self.predictions_regex)
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._counts = np.zeros((0, 0), dtype=np.int64)
        self._in_evaluation = False
        self._confused: set[int] = set()  # classes confused in the evaluations so far
        self._streak: dict[int, int] = {}  # class -> confused evaluations in a row before
        self._previous_accuracy: float | None = None  # of the last evaluation closed

    def _close_evaluation(self) -> None:
        self._streak = {c: self._streak.get(c, 0) + 1 for c in self._confused}
        self._confused = set()
        total = int(self._counts.sum())
        self._previous_accuracy = float(np.trace(self._counts)) / total if total else None
        self._counts = np.zeros((0, 0), dtype=np.int64)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.labels_regex) + self.select(
            step, mode, None, self.predictions_regex
        )

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if self.mode is not None and mode.value != self.mode:
            if self.per_evaluation and self._in_evaluation:
                self._in_evaluation = False
                self._close_evaluation()
            return False
        self._in_evaluation = True
        labels = self.select(step, mode, None, self.labels_regex)
        predictions = self.select(step, mode, None, self.predictions_regex)
        if not labels or not predictions:
            return False
        y = class_ids(self.value(labels[0], step, mode))
        p = class_ids(self.value(predictions[0], step, mode))
        if y.shape != p.shape or y.size == 0:
            return False
        size = max(self._counts.shape[0], int(y.max()) + 1, int(p.max()) + 1)
        if size > self._counts.shape[0]:
            grown = np.zeros((size, size), dtype=np.int64)
            grown[: self._counts.shape[0], : self._counts.shape[1]] = self._counts
            self._counts = grown
        np.add.at(self._counts, (y, p), 1)
        rows = self._counts.sum(axis=1, keepdims=True)
        seen = rows[:, 0] > 0
        normalised = np.divide(self._counts, rows, where=rows > 0, out=np.zeros(self._counts.shape))
        diag = np.diag(normalised)
        off = normalised - np.diag(diag)
        accuracy = np.trace(self._counts) / max(int(self._counts.sum()), 1)
        if accuracy < self.min_accuracy or self._still_learning(accuracy):
            self._confused = set()
            return False
        bad_diag = [int(c) for c in np.flatnonzero(seen & (diag < self.min_diag))]
        bad_off = [int(i) for i in np.flatnonzero(off.max(axis=1) > self.max_off_diag)]
        self._confused = set(bad_diag) | set(bad_off)
        for c in bad_diag:
            if self._streak.get(c, 0) + 1 >= self.patience:
                message = f"class {c}: {diag[c]:.2f} predicted right (< {self.min_diag:g})"
                return self.fire(step, mode, predictions[0], message + self._times(c))
        for i in bad_off:
            if self._streak.get(i, 0) + 1 >= self.patience:
                j = int(off[i].argmax())
                message = f"class {i} predicted as {j} {off[i, j]:.2f} of the time"
                return self.fire(step, mode, predictions[0], message + self._times(i))
        return False

    def _still_learning(self, accuracy: float) -> bool:
        """The evaluation's accuracy is clearly above the previous one's."""
        if not self.per_evaluation or self.learning_sigmas <= 0:
            return False
        if self._previous_accuracy is None:
            return False
        samples = int(self._counts.sum())
        noise = (accuracy * (1 - accuracy) / samples) ** 0.5
        return accuracy - self._previous_accuracy > self.learning_sigmas * noise

    def _times(self, c: int) -> str:
        count = self._streak.get(c, 0) + 1
        return f" in {count} evaluations in a row" if self.per_evaluation and count > 1 else ""

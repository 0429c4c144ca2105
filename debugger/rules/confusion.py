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
    `min_diag` or an off-diagonal entry above `max_off_diag`."""

    name = "Confusion"
    min_diag: float = 0.9
    max_off_diag: float = 0.1
    labels_regex: str = ".*labels"
    predictions_regex: str = ".*predictions"
    mode: str | None = "EVAL"

    def validate(self) -> None:
        check_regex(self.name, "labels_regex", self.labels_regex)
        check_regex(self.name, "predictions_regex", self.predictions_regex)
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._counts = np.zeros((0, 0), dtype=np.int64)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.labels_regex) + self.select(
            step, mode, None, self.predictions_regex
        )

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if self.mode is not None and mode.value != self.mode:
            return False
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
        bad_diag = [int(c) for c in np.flatnonzero(seen & (diag < self.min_diag))]
        if bad_diag:
            c = bad_diag[0]
            message = f"class {c}: {diag[c]:.2f} predicted right (< {self.min_diag:g})"
            return self.fire(step, mode, predictions[0], message)
        if off.max(initial=0.0) > self.max_off_diag:
            i, j = np.unravel_index(off.argmax(), off.shape)
            message = f"class {i} predicted as {j} {off[i, j]:.2f} of the time"
            return self.fire(step, mode, predictions[0], message)
        return False

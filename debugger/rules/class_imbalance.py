"""ClassImbalance: the labels are skewed, or some class is mostly mispredicted."""

from __future__ import annotations

from collections import deque

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


def class_ids(value: np.ndarray) -> np.ndarray:
    """Class ids from ids or from scores/logits (argmax over the last axis)."""
    value = np.asarray(value)
    if value.ndim >= 2 and value.shape[-1] > 1:
        value = value.argmax(axis=-1)
    return value.reshape(-1).astype(np.int64)


@register_rule
class ClassImbalance(Rule):
    """Over the most recent `samples` labels (and predictions, when saved): fires when the
    most frequent class outnumbers the rarest by more than `threshold_imbalance`, or when
    more than `threshold_misprediction` of some class's samples are mispredicted while
    at most `max_others_misprediction` of the other classes' samples are, over `patience`
    x `samples` samples in a row. The count ratio is judged only for a classifier of at most
    `max_classes` classes (the distinct labels seen so far).

    Why `max_classes` (LEGACY_DEFAULTS: any number): the problem this rule names, a minority
    class a classifier learns to ignore, is one of a few classes. Over many classes uneven
    counts are the data's nature (a vocabulary's tokens follow Zipf's law) and, over a
    window of `samples`, sampling noise: 500 samples of 50 equally likely classes give a
    rarest class of about 4 and a most frequent of about 18, above the ratio of 10 in 3 %
    of windows (so, over a long run, an alarm); the zoo's word-level language models (256
    tokens, 2,048 a batch) fired on their first batch. At 20 classes and 500 samples a
    balanced window's ratio is about 2 and never reached 10 in 2,000 draws. The
    misprediction check, which says what the model does with the distribution, applies to
    any number of classes.

    Why the misprediction conditions (LEGACY_DEFAULTS: none): a model that has not learned yet
    mispredicts every class (a healthy run's first few hundred samples), and while it
    learns one class often lags the others for a few dozen steps; neither says anything
    about imbalance. A class left behind while the others are learned, and staying behind,
    does."""

    name = "ClassImbalance"
    threshold_imbalance: float = 10.0
    threshold_misprediction: float = 0.7
    LEGACY_DEFAULTS = {"max_others_misprediction": None, "patience": 1, "max_classes": None}
    max_classes: int | None = 20
    max_others_misprediction: float | None = 0.1
    patience: int = 3
    samples: int = 500
    labels_regex: str = ".*labels"
    predictions_regex: str = ".*predictions"

    def setup(self) -> None:
        self._labels: deque[np.ndarray] = deque()
        self._predictions: deque[np.ndarray | None] = deque()
        self._count = 0
        self._seen = 0  # samples so far
        self._behind_since: dict[int, int] = {}  # class -> samples seen when it fell behind
        self._classes: set[int] = set()  # every label seen so far

    def validate(self) -> None:
        check_regex(self.name, "labels_regex", self.labels_regex)
        check_regex(self.name, "predictions_regex", self.predictions_regex)
        if self.max_classes is not None and self.max_classes < 2:
            raise ValueError(f"{self.name}: parameter 'max_classes' must be >= 2")

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.labels_regex) + self.select(
            step, mode, None, self.predictions_regex
        )

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        labels_names = self.select(step, mode, None, self.labels_regex)
        if not labels_names:
            return False
        labels = class_ids(self.value(labels_names[0], step, mode))
        predictions_names = self.select(step, mode, None, self.predictions_regex)
        predictions = None
        if predictions_names:
            predictions = class_ids(self.value(predictions_names[0], step, mode))
            if predictions.shape != labels.shape:
                predictions = None
        self._labels.append(labels)
        self._classes.update(np.unique(labels).tolist())
        self._predictions.append(predictions)
        self._count += labels.size
        self._seen += labels.size
        # Keep just enough recent steps to cover `samples`.
        while self._count - self._labels[0].size >= self.samples:
            self._count -= self._labels.popleft().size
            self._predictions.popleft()
        if self._count < self.samples:
            return False
        all_labels = np.concatenate(list(self._labels))
        classes, counts = np.unique(all_labels, return_counts=True)
        few = self.max_classes is None or len(self._classes) <= self.max_classes
        if few and len(classes) >= 2 and counts.max() / counts.min() > self.threshold_imbalance:
            message = (
                f"class {classes[counts.argmax()]} has {counts.max()} of the last "
                f"{self._count} samples, class {classes[counts.argmin()]} only {counts.min()} "
                f"(ratio > {self.threshold_imbalance:g})"
            )
            return self.fire(step, mode, labels_names[0], message)
        recent = zip(self._labels, self._predictions, strict=True)
        pairs = [(lab, pre) for lab, pre in recent if pre is not None]
        if pairs:
            y = np.concatenate([lab for lab, _ in pairs])
            p = np.concatenate([pre for _, pre in pairs])
            for cls in np.unique(y):
                wrong = float(np.mean(p[y == cls] != cls))
                others = y != cls
                behind = wrong > self.threshold_misprediction
                if behind and self.max_others_misprediction is not None and others.any():
                    others_wrong = float(np.mean(p[others] != y[others]))
                    behind = others_wrong <= self.max_others_misprediction
                if not behind:
                    self._behind_since.pop(int(cls), None)
                    continue
                since = self._behind_since.setdefault(int(cls), self._seen - self._count)
                if self._seen - since >= self.patience * self.samples:
                    message = (
                        f"class {cls}: {wrong:.0%} of its recent samples mispredicted "
                        f"(> {self.threshold_misprediction:g})"
                    )
                    return self.fire(step, mode, predictions_names[0], message)
        return False

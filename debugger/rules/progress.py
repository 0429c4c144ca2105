"""Whether a model is learning, for the gradient rules: AUTOTRAINER counts a gradient
problem only when training is not converging, since a healthy model's gradients also get
small (near its optimum) or sparse (ReLUs off for most inputs)."""

from __future__ import annotations

import math
from collections import deque
from statistics import median
from typing import TYPE_CHECKING

from remedy.debugger.modes import ModeKeys

if TYPE_CHECKING:
    from remedy.debugger.rules.base import Rule

RECENT = 5  # losses: a median over a few batches, not one batch's noise


class LossProgress:
    """Follows a rule's TRAIN losses. `learning()`: the median of the last RECENT saved
    losses is below (1 - min_progress) x the first saved loss (the untrained model's): the
    model has learned something and is not diverging. Unknown (no loss saved): False,
    so the gradient rules judge the gradients alone. min_progress None: never learning
    (the rules judge every step, LEGACY_DEFAULTS)."""

    def __init__(self, rule: Rule, min_progress: float | None) -> None:
        self.rule = rule
        self.min_progress = min_progress
        self.initial: float | None = None
        self.recent: deque[float] = deque(maxlen=RECENT)

    def update(self, step: int, mode: ModeKeys) -> None:
        if self.min_progress is None or mode is not ModeKeys.TRAIN:
            return
        found = self.rule.loss_at(step, mode)
        if found is None:
            return
        loss = found[1]
        if self.initial is None and math.isfinite(loss):
            self.initial = loss
        self.recent.append(loss if math.isfinite(loss) else math.inf)

    def learning(self) -> bool:
        if self.min_progress is None or self.initial is None or self.initial <= 0:
            return False
        return median(self.recent) < (1 - self.min_progress) * self.initial

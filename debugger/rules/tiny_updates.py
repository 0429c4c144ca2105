"""TinyUpdates: updates tiny relative to the weights while the loss has not left its start
(a learning rate far too small: a stalled run)."""

from __future__ import annotations

import math
from statistics import median

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class TinyUpdates(Rule):
    """Between two saved steps of the weights, each weight's update/weight ratio
    ||w(step) - w(previous)|| / ||w(previous)|| per training step in between; fires when
    the median over the weights is below `threshold` in `patience` intervals in a row
    while the TRAIN loss is still within `min_progress` of its first saved value (the
    untrained model's).

    "A learning rate far too small" means exactly this: every step moves the weights by
    a negligible fraction of themselves, so the loss stays where it started. Healthy runs
    move their weights by about 1e-3 of their norm a step (the usual rule of thumb; the
    runs of benchmarks/rule_quality.py and rule_false_alarms.py: 5e-4 to 3e-2, warmups
    included); 1e-5, 50x below the slowest healthy one, is far too small. The loss
    condition keeps a run whose schedule decays the rate to almost nothing after it
    learned (the end of a cosine schedule) from counting: its loss is far below its
    start. A ratio over the median of the weights, not each weight: one frozen layer (an
    embedding of rare tokens, a bias behind batch norm) is no stall.

    Unlike WeightUpdateRatio (the managed rule, a ratio between saved steps against 1e-8
    and 10), the ratio is per step, so it does not depend on the save interval.
    """

    name = "TinyUpdates"
    READS = (reads.LOSSES,)
    threshold: float = 1e-5
    min_progress: float = 0.1
    patience: int = 2
    collection_names: list[str] | None = ["weights"]
    tensor_regex: str | None = None

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise ValueError(f"{self.name}: parameter 'threshold' must be > 0")
        if not 0 <= self.min_progress < 1:
            raise ValueError(f"{self.name}: parameter 'min_progress' must be in [0, 1)")
        if self.patience < 1:
            raise ValueError(f"{self.name}: parameter 'patience' must be >= 1")

    def setup(self) -> None:
        self._previous: tuple[int, dict[str, np.ndarray]] | None = None
        self._initial: float | None = None  # the first saved TRAIN loss
        self._latest: float | None = None  # the latest saved TRAIN loss
        self._streak = 0  # intervals in a row with tiny updates and no progress

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex, everything=False)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if mode is not ModeKeys.TRAIN:
            return False
        loss = self.loss_at(step, mode)
        if loss is not None and math.isfinite(loss[1]):
            self._latest = loss[1]
            if self._initial is None:
                self._initial = loss[1]
        names = self.required_tensors(step, mode)
        if not names or self._initial is None:
            return False  # without a loss there is no judging: read nothing (Error at the end)
        current = {n: np.asarray(self.value(n, step, mode), dtype=np.float64) for n in names}
        previous, self._previous = self._previous, (step, current)
        if previous is None or step <= previous[0]:
            return False
        steps = step - previous[0]
        ratios = [
            float(np.linalg.norm(current[n] - before) / np.linalg.norm(before)) / steps
            for n, before in previous[1].items()
            if n in current and current[n].shape == before.shape and np.linalg.norm(before) > 0
        ]
        if not ratios:
            return False
        ratio = median(ratios)
        stalled = (
            ratio < self.threshold
            and self._initial is not None
            and self._latest is not None
            and self._latest > (1 - self.min_progress) * self._initial
        )
        self._streak = self._streak + 1 if stalled else 0
        if self._streak < self.patience:
            return False
        assert self._initial is not None and self._latest is not None
        return self.fire(
            step,
            mode,
            None,
            f"updates are {ratio:.2g} of the weights a step (median over {len(ratios)} "
            f"weights, < {self.threshold:g}) in {self._streak} intervals in a row up to step "
            f"{step}, and the loss {self._latest:.4g} is still within {self.min_progress:.0%} "
            f"of its start {self._initial:.4g} or above it: nothing learns (a learning rate "
            "far too small, or units that no longer pass a gradient)",
        )

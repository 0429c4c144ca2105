"""Robust level and spread of a window of recent values, for the spike rules: the median
and the median absolute deviation follow a value that falls for hours where a fixed
threshold does not, and one outlier does not move them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remedy.debugger.rules.base import Rule

MAD_TO_SIGMA = 1.4826  # median absolute deviation x this = standard deviation, for a normal


def level_and_spread(values: Iterable[float]) -> tuple[float, float]:
    """(median, robust standard deviation) of the values."""
    values = list(values)
    level = median(values)
    return level, MAD_TO_SIGMA * median(abs(x - level) for x in values)


def check_spike_parameters(rule: Rule) -> None:
    """A spike rule's `window` (>= 5), `sigmas` and `factor` (finite, > 0)."""
    window = rule.window  # type: ignore[attr-defined]
    if window < 5:
        raise ValueError(f"{rule.name}: parameter 'window' must be >= 5, got {window}")
    for key in ("sigmas", "factor"):
        value = getattr(rule, key)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{rule.name}: parameter {key!r} must be > 0, got {value}")

"""How far a job's updates move its weights, as a fraction of themselves: what its step
records carry, and the figure the policy reads from them.

A rate far too small shows in the weights before it shows in the loss: each update moves
them by a negligible fraction. The job (training/update_ratio.py) records every
AGREEMENT_EVERY updates the median over its weights of ||w(t) - w(t - k)|| / ||w(t - k)||
per update, k = AGREEMENT_EVERY (UPDATE_RATIO_FIELD): their net movement, as the
TinyUpdates rule measures it between saved steps. The monitor keeps one figure per
launch, at the rate the launch was given (launch_update_ratio), and a search up from a
rate that stalled passes over the rates this figure says would still move the weights
less than a healthy run does (strategies/search_lr.py): an update's size is in proportion
to the rate, for SGD (the gradient times the rate) and for Adam (about the rate itself)
alike.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

UPDATE_RATIO_FIELD = "update_ratio"
# The weights of a healthy run move by about this fraction of themselves an update (the
# usual rule of thumb). By this measure the intended runs of benchmarks/repair_quality.py
# move theirs 4.5e-3 (the VAE) to 4.6e-2 (the word LM) over their whole length; a rate at
# which the measure says less is too small. TinyUpdates fires at 1e-5.
HEALTHY_UPDATE_RATIO = 1e-3
# Updates a tenth of that or less are far too small, whatever else the run shows: a launch
# that learned nothing with them is held back by its rate, not on the noise floor of a rate
# too high (whose updates are large: the GPT-style job at 100x 0.032, the built-in ReLU
# ResNet at chance 0.03). The runs at 1/1000 of their rate in benchmarks/repair_quality.py
# 9e-6 to 1.1e-4; examples/digits at 1/1000 (Adadelta under dropout, its gradients
# disagreeing, 0.13/0.18) 1.7e-5.
TINY_UPDATE_RATIO = HEALTHY_UPDATE_RATIO / 10


def launch_update_ratio(
    ratios: Sequence[float | None], rates: Sequence[float | None], typed: float | None
) -> float | None:
    """The median of a launch's measured update ratios (one entry per step record, None
    where not measured), each scaled to the rate the launch was given (`typed`) from the
    rate its step ran at (a warmup's or a schedule's; unscaled where not recorded); None
    when nothing was measured."""
    scaled = []
    for ratio, rate in zip(ratios, rates, strict=True):
        if ratio is None or not math.isfinite(ratio) or (rate is not None and rate <= 0):
            continue  # a step at rate 0 (a warmup's first) says nothing of the rate
        if typed is not None and rate is not None:
            ratio *= typed / rate
        scaled.append(ratio)
    return statistics.median(scaled) if scaled else None

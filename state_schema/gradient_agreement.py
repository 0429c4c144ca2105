"""How much a job's consecutive gradients agree: what its step records carry, and the
figure the verdict reads from them.

Far from a minimum the mean gradient outweighs each batch's noise, and the gradients of
updates a few apart point the same way; near one the noise dominates and they do not
(Pflug's test of stationarity for SGD reads the same inner products). A run at a rate far
too small can end with a loss that slows as a converged run's does, yet with gradients
that still agree (benchmarks/gradient_agreement.py). The job (training/gradient_agreement.py)
samples the cosine similarity of the gradients of update t and t + lag every
AGREEMENT_EVERY updates and writes it into that step's record (AGREEMENT_FIELDS); the
monitor takes the mean of each lag over the last third of a completed launch
(last_third_agreement), and the verdict asks the run when both agree (records/verdict.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Gradients kept every this many updates, compared with the next update's and the fifth's.
AGREEMENT_EVERY = 5
LAGS = (1, 5)
# A step record's field: the cosine similarity of the gradients of the update `lag` before
# and this one's (present on the steps it was measured at).
AGREEMENT_FIELDS = {lag: f"grad_agreement_{lag}" for lag in LAGS}
# The fewest measurements of each lag the last third must hold to say anything (a launch
# of 60 updates holds 4).
AGREEMENT_MIN_MEASURED = 3


def last_third_agreement(per_lag: Sequence[Sequence[float | None]]) -> list[float]:
    """The mean of each lag's measurements (one list per lag of LAGS, one entry per step
    record, None where not measured) over the last third of the launch's steps; [] when a
    lag has fewer than AGREEMENT_MIN_MEASURED finite measurements there."""
    means = []
    for figures in per_lag:
        last = figures[2 * len(figures) // 3 :]
        measured = [x for x in last if x is not None and math.isfinite(x)]
        if len(measured) < AGREEMENT_MIN_MEASURED:
            return []
        means.append(statistics.fmean(measured))
    return means

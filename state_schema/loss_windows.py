"""The losses "did the model train?" is judged by: a window of a launch's first training
losses (the untrained model's) and a window of its last ones (the trained model's), not
one batch each: a single mini-batch loss is noisy, and a first step's loss can be inflated
(an unstable start) far above what the model knows.

A job keeps up to LOSS_WINDOW finite losses of each end (LossWindows) and writes them to
its progress file as first_losses / last_losses; the verdict (records/verdict.py) takes
the median of a window of them, sized to the steps the launch ran. Of a completed launch
the monitor also takes windows at a third and two thirds of its steps (loss_thirds): a
descent still speeding up at the end tells of a learning rate holding the run back, unless
the schedule was annealing the rate then (rate_thirds: a rate falling towards the end
speeds the descent up by itself, as the noise of a high rate settles), and how often the
loss rose from one step to the next over the last third (rising_share: whether the job's
batches are noisy at all).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque

# Losses kept at each end of a launch: the widest window the verdict takes.
LOSS_WINDOW = 20


class LossWindows:
    """A launch's first and last LOSS_WINDOW finite training losses."""

    def __init__(self, size: int = LOSS_WINDOW) -> None:
        self.first: list[float] = []
        self.last: deque[float] = deque(maxlen=size)
        self.size = size

    def add(self, loss: float | None) -> None:
        if loss is None or not math.isfinite(loss):
            return  # a non-finite step says nothing about the loss level
        if len(self.first) < self.size:
            self.first.append(loss)
        self.last.append(loss)

    def fields(self) -> dict[str, list[float]]:
        """What a progress file carries (empty lists left out)."""
        found = {"first_losses": self.first, "last_losses": list(self.last)}
        return {name: list(values) for name, values in found.items() if values}


def window_size(steps_run: int, first: list[float], last: list[float]) -> int:
    """Losses in each window: up to LOSS_WINDOW, and at most a quarter of the steps run, so
    that the first and the last window of a short launch are different steps."""
    return max(1, min(LOSS_WINDOW, len(first), len(last), steps_run // 4))


def windowed_losses(
    steps_run: int, first: list[float], last: list[float]
) -> tuple[float, float, int] | None:
    """(median of the first window, median of the last window, window size); None without
    finite losses at both ends."""
    first = [x for x in first if math.isfinite(x)]
    last = [x for x in last if math.isfinite(x)]
    if not first or not last:
        return None
    size = window_size(steps_run, first, last)
    return statistics.median(first[:size]), statistics.median(last[-size:]), size


# The fewest steps whose thirds say anything: windows of 4 steps, well apart, and 3
# gradient agreement samples of each lag in the last third (state_schema/gradient_agreement.py)
# at an eighth of a 400-update job.
THIRDS_MIN_STEPS = 48


def loss_thirds(losses: list[float | None]) -> list[float]:
    """Medians of a window at the start, a third, two thirds and the end of a launch's step
    losses (None: a non-finite step); [] for a launch too short to tell, or one with a
    window without a finite loss."""
    n = len(losses)
    if n < THIRDS_MIN_STEPS:
        return []
    size = min(LOSS_WINDOW, n // 12)
    starts = (0, n // 3 - size // 2, 2 * n // 3 - size // 2, n - size)
    medians = []
    for start in starts:
        window = [x for x in losses[start : start + size] if x is not None and math.isfinite(x)]
        if not window:
            return []
        medians.append(statistics.median(window))
    return medians


# The fewest steps whose rates' thirds say anything: a rate is an exact figure, not a noisy
# one, so a few steps a third tell a warmup's rise (a launch asked at an eighth of a
# 320-update job has run 40, under THIRDS_MIN_STEPS: its warmup went unseen, and a rate
# far too small was left to a quarter).
RATE_THIRDS_MIN_STEPS = 12


def rate_thirds(rates: list[float | None]) -> list[float]:
    """Mean learning rate over the middle and over the last third of a launch's steps
    (None: a step without a recorded rate); [] for a launch too short to tell, or one
    with a step of either third whose rate is not known."""
    n = len(rates)
    if n < RATE_THIRDS_MIN_STEPS:
        return []
    means = []
    for third in (rates[n // 3 : 2 * n // 3], rates[2 * n // 3 :]):
        known = [x for x in third if x is not None and math.isfinite(x)]
        if len(known) != len(third):
            return []
        means.append(statistics.fmean(known))
    return means


# The fewest pairs of consecutive finite losses in the last third that tell a mini-batch's
# noise (about half of them rising) from a full batch's smooth descent (near none): a
# launch held at half of 90 updates holds 14, where its gradient agreement is measured too.
RISES_MIN_PAIRS = 10


def rising_share(losses: list[float | None]) -> float | None:
    """The share of the last third's steps whose loss rose over the step before (pairs of
    finite losses only): about half under a mini-batch's noise, near 0 for a full batch
    descending smoothly; None for a launch too short to tell (RISES_MIN_PAIRS)."""
    last = losses[2 * len(losses) // 3 :]
    finite = [x if x is not None and math.isfinite(x) else None for x in last]
    pairs = [(a, b) for a, b in itertools.pairwise(finite) if a is not None and b is not None]
    if len(pairs) < RISES_MIN_PAIRS:
        return None
    return sum(b > a for a, b in pairs) / len(pairs)

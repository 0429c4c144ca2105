"""When a job that shows no progress is frozen: a limit learned from the job's own pace.

The supervisor sees the job move (progress.json, the training log or metrics.jsonl
changes) and keeps the intervals between moves. Once it has seen MIN_INTERVALS of them,
a job still for longer than max(floor, FACTOR x the longest interval so far) is frozen:
a fast loop that freezes (SIGSTOP, a deadlock) is caught within minutes, while a slow
one (long steps, evaluations that once took long) gets FACTOR times its slowest pace.
The floor (REMEDY_PROGRESS_FLOOR_S, default 300 s) covers start-up and an evaluation
pass longer than any interval seen before it. run_spec.progress_timeout_s is the fixed
limit above it all (null: never), and with run_spec.progress_timeout "fixed" the only one.
"""

from __future__ import annotations

import math
import os

FLOOR_ENV = "REMEDY_PROGRESS_FLOOR_S"
DEFAULT_FLOOR_S = 300.0
FACTOR = 20.0
MIN_INTERVALS = 5


def floor_s(environ: dict[str, str] | os._Environ[str] = os.environ) -> float:
    value = environ.get(FLOOR_ENV)
    try:
        return float(value) if value else DEFAULT_FLOOR_S
    except ValueError:
        return DEFAULT_FLOOR_S


class ProgressWatch:
    """The job's last move and its pace, from the times it was seen to move."""

    def __init__(self, started: float, fixed_s: float | None, adaptive: bool, floor: float):
        self.last_move = started
        self.fixed_s = fixed_s
        self.adaptive = adaptive and fixed_s is not None  # null: never frozen
        self.floor = floor
        self.longest = 0.0
        self.intervals = 0
        self.moved_once = False  # the first move ends start-up, which is not a pace

    def moved(self, when: float) -> None:
        if when <= self.last_move:
            return
        if self.moved_once:
            self.longest = max(self.longest, when - self.last_move)
            self.intervals += 1
        self.moved_once = True
        self.last_move = when

    def limit_s(self) -> float:
        """How long the job may stay still now; inf: never frozen."""
        fixed = math.inf if self.fixed_s is None else self.fixed_s
        if not self.adaptive or self.intervals < MIN_INTERVALS:
            return fixed
        return min(fixed, max(self.floor, FACTOR * self.longest))

    def why(self) -> str:
        """Which limit applies, for the failure reason."""
        fixed = f"run_spec.progress_timeout_s {self.fixed_s:g}" if self.fixed_s else ""
        limit = self.limit_s()
        if limit == self.fixed_s:
            return fixed
        return (
            f"{limit:g} s learned from its pace: {FACTOR:g} x its slowest interval "
            f"{self.longest:.1f} s, at least {self.floor:g} s ({FLOOR_ENV}); {fixed}"
        )

"""StalledTraining: no new step for too long."""

from __future__ import annotations

import time

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule


@register_rule
class StalledTraining(Rule):
    """Fires when `threshold` seconds pass without a new step: between two saved steps
    (by their wall times), or, while the job runs, since the last step (or since the rule
    started, before any step)."""

    name = "StalledTraining"
    READS_TENSORS = False  # step times only: it judges a job that writes nothing too
    threshold: float = 1800.0

    def setup(self) -> None:
        self._last: tuple[float, int, ModeKeys] | None = None
        self._started = time.time()

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        wall = self.trial.step_header(step, mode).wall_time
        last = self._last
        if last is None or wall >= last[0]:
            self._last = (wall, step, mode)
        if last is not None and wall - last[0] > self.threshold:
            message = (
                f"{wall - last[0]:.0f} s between {last[2].value} step {last[1]} and "
                f"{mode.value} step {step} (> {self.threshold:g} s)"
            )
            return self.fire(step, mode, None, message)
        return False

    def invoke_idle(self) -> bool:
        since = self._started if self._last is None else self._last[0]
        idle = time.time() - since
        if idle <= self.threshold:
            return False
        step, mode = (0, ModeKeys.TRAIN) if self._last is None else self._last[1:]
        message = f"no new step for {idle:.0f} s (> {self.threshold:g} s)"
        return self.fire(step, mode, None, message)

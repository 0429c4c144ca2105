"""SlowConvergence (AUTOTRAINER): the metric never improves by a useful amount."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class SlowConvergence(Rule):
    """AUTOTRAINER's check: fires when the largest gain of the accuracy between two
    consecutive saved values (e.g. epochs) is below `min_gain`, in every mode that has at
    least `min_steps` values (train and validation alike when both are saved)."""

    name = "SlowConvergence"
    metric_regex: str = ".*accuracy"
    min_gain: float = 0.01
    min_steps: int = 10

    def validate(self) -> None:
        check_regex(self.name, "metric_regex", self.metric_regex)

    def setup(self) -> None:
        self._last: dict[ModeKeys, float] = {}
        self._best_gain: dict[ModeKeys, float] = {}
        self._count: dict[ModeKeys, int] = {}

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.metric_regex)[:1]

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        names = self.required_tensors(step, mode)
        if not names:
            return False
        value = self.reduction(names[0], step, mode, "mean")
        if mode in self._last:
            gain = value - self._last[mode]
            self._best_gain[mode] = max(self._best_gain.get(mode, gain), gain)
        self._last[mode] = value
        self._count[mode] = self._count.get(mode, 0) + 1
        ready = [m for m, n in self._count.items() if n >= self.min_steps]
        if mode not in ready:
            return False
        if all(self._best_gain[m] < self.min_gain for m in ready):
            gains = ", ".join(f"{m.value} {self._best_gain[m]:.4f}" for m in ready)
            message = f"{names[0]}: largest one-step gain {gains} < {self.min_gain:g}"
            return self.fire(step, mode, names[0], message)
        return False

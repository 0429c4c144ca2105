"""OscillatingLoss (AUTOTRAINER): the metric swings up and down instead of converging."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


def swings(history: list[float], min_gap: float) -> int:
    """Number of peak/trough pairs (consecutive turning points) at least min_gap apart."""
    turns: list[float] = []
    for i in range(1, len(history) - 1):
        before, here, after = history[i - 1], history[i], history[i + 1]
        if (here > before and here >= after) or (here < before and here <= after):
            turns.append(here)
    return sum(1 for a, b in zip(turns, turns[1:], strict=False) if abs(a - b) >= min_gap)


@register_rule
class OscillatingLoss(Rule):
    """AUTOTRAINER's check on the accuracy history (one value per saved step of the
    metric, e.g. per epoch): fires when the count of peak/trough pairs with a gap of at
    least `min_gap` reaches `ratio` x the number of values so far. Starts after `min_steps`
    values (AUTOTRAINER: 30 % of the planned epochs). Each mode has its own history."""

    name = "OscillatingLoss"
    metric_regex: str = ".*accuracy"
    min_gap: float = 0.03
    ratio: float = 0.2
    min_steps: int = 10

    def validate(self) -> None:
        check_regex(self.name, "metric_regex", self.metric_regex)

    def setup(self) -> None:
        self._history: dict[ModeKeys, list[float]] = {}

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.metric_regex)[:1]

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        names = self.required_tensors(step, mode)
        if not names:
            return False
        history = self._history.setdefault(mode, [])
        history.append(self.reduction(names[0], step, mode, "mean"))
        if len(history) < self.min_steps:
            return False
        count = swings(history, self.min_gap)
        if count >= self.ratio * len(history):
            message = (
                f"{names[0]} oscillates: {count} swings of >= {self.min_gap:g} in "
                f"{len(history)} {mode.value} values (>= {self.ratio:g} x)"
            )
            return self.fire(step, mode, names[0], message)
        return False

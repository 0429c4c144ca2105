"""GradientNormSpike: the total gradient norm jumps far above its recent level (median/MAD)."""

from __future__ import annotations

import math
from collections import deque

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule
from remedy.debugger.rules.robust import check_spike_parameters, level_and_spread


@register_rule
class GradientNormSpike(Rule):
    """Fires at a saved step whose total gradient norm (the L2 norm over every tensor of the
    "gradients" collection) is more than `sigmas` robust standard deviations (median
    absolute deviation x 1.4826) and more than `factor` x above the median of the `window`
    saved gradient steps before it, or is not finite. TRAIN steps only; the first `window`
    saved steps only fill the window.

    Gradient-norm spikes come before loss spikes (OLMo 2's report): the update that blows
    the loss up is computed from a gradient that is already far too large, so this rule can
    stop a run, and name the onset a rollback restarts before, while the loss is still
    finite. The gradient norm falls and rises over a healthy run (fast at first, then with
    the learning rate), so its level is the median of the recent window, which one outlier
    does not move. `factor` is 10 because healthy runs spike too: measured on the tiny
    healthy built-in runs of benchmarks/rule_false_alarms.py, one batch's norm reached 3.6x
    its median under SGD with batch norm and 6.6x under Adam (which normalises its updates,
    so a large gradient is no large step), where a learning rate 10x too high took it 7x,
    then 200x, one update later, while the loss was still finite.
    """

    name = "GradientNormSpike"
    READS = (reads.GRADIENTS,)
    window: int = 20
    sigmas: float = 6.0
    factor: float = 10.0

    def validate(self) -> None:
        check_spike_parameters(self)

    def setup(self) -> None:
        self._recent: deque[float] = deque(maxlen=self.window)

    def norm_at(self, step: int, mode: ModeKeys) -> float | None:
        """The total L2 norm of the step's saved gradients (None: none saved there)."""
        names = self.select(step, mode, ["gradients"], None, everything=False)
        if not names:
            return None
        squares = sum(self.reduction(name, step, mode, "l2") ** 2 for name in names)
        return math.sqrt(squares)

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, ["gradients"], None, everything=False)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if mode is not ModeKeys.TRAIN:
            return False
        norm = self.norm_at(step, mode)
        if norm is None:
            return False
        if not math.isfinite(norm):
            return self.fire(step, mode, None, f"the gradient norm is {norm} at step {step}")
        if len(self._recent) == self.window:
            level, spread = level_and_spread(self._recent)
            if norm - level > self.sigmas * spread and norm > self.factor * level > 0:
                sigmas = f"{(norm - level) / spread:.1f} robust sigmas and " if spread else ""
                return self.fire(
                    step,
                    mode,
                    None,
                    f"the gradient norm {norm:.4g} at step {step} is {sigmas}"
                    f"{norm / level:.3g}x above the median {level:.4g} of the {self.window} "
                    "saved steps before it",
                )
        self._recent.append(norm)  # a rise that did not fire still joins the window
        return False

"""LossSpike: the loss jumps far above its recent level (robust statistics over a window)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from statistics import median

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule
from remedy.debugger.rules.robust import check_spike_parameters, level_and_spread


@register_rule
class LossSpike(Rule):
    """Fires at a saved step whose loss is more than `sigmas` robust standard deviations
    (median absolute deviation x 1.4826) and more than `factor` x above the median of the
    `window` saved steps before it, or is not finite. `mode`: only that mode's losses
    (default TRAIN); the first `window` steps only fill the window.

    The late, expensive failure (PaLM counted about 20 on its largest model) starts as a
    spike: a median and a MAD over a window follow a loss that falls for hours, where a
    fixed threshold or a mean does not, and one outlier does not move them. The onset step
    is what a rollback restarts before (strategy rollback_and_skip). Healthy per-step noise
    stays within a few sigmas of the median, and `factor` keeps a near-zero loss's tiny
    absolute jumps from counting. So does `min_rise_fraction`: the rise above the median
    must also exceed that fraction (a quarter) of the median of the mode's first `window`
    losses (the loss scale of the problem: about ln(classes) for a classifier). A converged
    classifier at 0.07 whose one batch reads 0.31 is 4x and 6 sigmas above its median, and
    still a model at 98 % accuracy; 0 turns the floor off.

    Like with like: learning-rate schedules change at epoch boundaries (a warmup epoch
    ends, the rate quadruples, and the next batch's loss doubles for a step on a healthy
    Adam run), so the first `settle_steps` steps of the mode after a step of another mode
    (an evaluation between epochs) are judged only for non-finite values and do not join
    the window: the new regime's losses are compared with the steady state, from the
    step after. A loss that keeps climbing is still caught then (and by DivergingLoss and
    ExplodingTensor meanwhile). 0: judge every step (LEGACY_DEFAULTS).

    A spike must also stay: it fires (at its own step, the onset) only when the median of
    the `confirm_steps` saved steps after it is out of line too (the same three tests
    against the same median and spread), and the last of them is not back within
    `sigmas` robust standard deviations of that median. A schedule change is
    not always at an epoch boundary, and Adam reacts to one late: on the built-in ResNet
    the loss doubles 12 steps after warmup ends, for one or two batches, and is back
    within 5 steps. A 1-D CNN on RMSprop at 10x its rate (examples/signals), its loss at
    0.012, read 0.165, 0.865 and 0.318, then 0.007, and ended at 100 % accuracy. A one-
    batch outlier or a transient the optimizer corrects is no failure; the start of a
    divergence stays up or climbs on (an explosion feeds on itself). The finding comes
    `confirm_steps` saved steps after the onset. 0: fire at the spike (LEGACY_DEFAULTS).
    """

    name = "LossSpike"
    READS = (reads.LOSSES,)
    window: int = 50
    sigmas: float = 6.0
    factor: float = 2.0
    min_rise_fraction: float = 0.25
    mode: str | None = "TRAIN"
    settle_steps: int = 5
    confirm_steps: int = 3
    LEGACY_DEFAULTS = {"settle_steps": 0, "confirm_steps": 0}

    def validate(self) -> None:
        check_spike_parameters(self)
        for key in ("settle_steps", "confirm_steps"):
            if getattr(self, key) < 0:
                raise ValueError(f"{self.name}: parameter {key!r} must be >= 0")
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._recent: dict[ModeKeys, deque[float]] = {}
        self._scale: dict[ModeKeys, float] = {}  # median of the first `window` losses
        self._last_mode: ModeKeys | None = None
        self._settling: dict[ModeKeys, int] = {}  # steps left to settle after a boundary
        self._pending: dict[ModeKeys, _Spike] = {}  # a spike waiting for its confirmation

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        boundary = self._last_mode is not None and mode is not self._last_mode
        self._last_mode = mode
        if self.mode is not None and mode.value != self.mode:
            return False
        if boundary:
            self._settling[mode] = self.settle_steps
        found = self.loss_at(step, mode)
        if found is None:
            return False
        name, loss = found
        if self._settling.get(mode, 0) > 0:
            self._settling[mode] -= 1
            if not math.isfinite(loss):
                return self.fire(step, mode, name, f"{name} is {loss} at step {step}")
            return False
        pending = self._pending.get(mode)
        if not math.isfinite(loss):
            if pending is not None:  # the spike went on to NaN or inf: it was the onset
                message = f"{self._message(name, pending)}; {name} is {loss} at step {step}"
                return self.fire(pending.step, mode, name, message)
            if len(self._recent.get(mode, ())) == self.window:
                return self.fire(step, mode, name, f"{name} is {loss} at step {step}")
            return False
        if pending is not None:
            pending.after.append(loss)
            if len(pending.after) == self.confirm_steps:
                del self._pending[mode]
                level, spread = pending.level, pending.spread
                stayed = self._out_of_line(median(pending.after), level, spread, mode)
                back = pending.after[-1] - level <= self.sigmas * spread
                if stayed and not back:
                    message = self._message(name, pending)
                    message += f", and the {self.confirm_steps} steps after it stay out of line"
                    return self.fire(pending.step, mode, name, message)
        recent = self._recent.setdefault(mode, deque(maxlen=self.window))
        if len(recent) == self.window and pending is None:
            level, spread = level_and_spread(recent)
            self._scale.setdefault(mode, level)
            if self._out_of_line(loss, level, spread, mode):
                spike = _Spike(step, loss, level, spread)
                if self.confirm_steps == 0:
                    return self.fire(step, mode, name, self._message(name, spike))
                self._pending[mode] = spike
        recent.append(loss)  # a spike that did not fire still joins the window
        return False

    def _out_of_line(self, loss: float, level: float, spread: float, mode: ModeKeys) -> bool:
        rise = loss - level
        return (
            rise > self.sigmas * spread
            and loss > self.factor * level > 0
            and rise > self.min_rise_fraction * self._scale[mode]
        )

    def _message(self, name: str, spike: _Spike) -> str:
        loss, level, step = spike.loss, spike.level, spike.step
        return (
            f"{name} {loss:.4g} at step {step} is {(loss - level) / spike.spread:.1f} robust "
            f"sigmas and {loss / level:.3g}x above the median {level:.4g} of the "
            f"{self.window} steps before it"
            if spike.spread > 0
            else f"{name} {loss:.4g} at step {step} is {loss / level:.3g}x the constant "
            f"{level:.4g} of the {self.window} steps before it"
        )


@dataclass
class _Spike:
    """A spike waiting for the steps after it."""

    step: int
    loss: float
    level: float  # the median of the window before it
    spread: float  # the window's robust standard deviation
    after: list[float] = field(default_factory=list)

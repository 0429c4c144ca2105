"""DivergingLoss: the loss climbs far above the best it reached (divergence that stays finite)."""

from __future__ import annotations

import math

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import LossWindowRule
from remedy.debugger.rules.registry import register_rule


@register_rule
class DivergingLoss(LossWindowRule):
    """Fires when the mean loss of a window of `num_steps` saved steps exceeds `factor` x the
    lowest window mean seen so far in the job, or is not finite. `mode`: only that mode's
    losses (default: each mode separately).

    ExplodingTensor only sees NaN and inf; a learning rate above the stability limit often
    drives the loss to 1e10 and keeps it finite, and the job then "completes" at chance
    accuracy. Healthy training noise stays well within a factor of 10 of the best window.

    Near 0 a ratio means nothing: a loss that went from 0.0009 back up to 0.18 is 200x its
    best and still a model that predicts well. The best window is therefore floored at
    `min_loss_fraction` x the first window's mean (the barely trained model's loss, about
    ln(classes) for a classifier): with the defaults the loss must climb back to the
    order of the untrained loss, or 10x its best when that is higher. 0 (LEGACY_DEFAULTS)
    restores the plain ratio.

    A ratio to the best also misses a loss that never got far below where it started: a
    small LSTM language model at a learning rate 50x too high goes from ln(vocabulary)
    (a uniform guess) to 7x that and stays there, finite. So the loss is also judged
    against the loss scale of the problem: the untrained model's loss, about ln(classes)
    for a classifier: the mode's first saved loss, or its first window's mean where that
    is higher but within NOISE_BAND x the first loss (one batch is noise: a regression's
    first batch at 0.51, its first window at 0.62, a flat loss around 0.64 after it, under
    a rate far too small to move it; a first window far above the first loss is the
    divergence itself: 0.51, then 85, 20245, ...): `patience` windows in a row above
    `initial_factor` (1.1) x it (clearly worse than the model before it learned anything)
    fire too. Clearly also means clear of the batches' noise: the bar is at least
    NOISE_Z standard errors of a difference between two windows above it, from the
    step-to-step spread of the first steps (base.step_noise; a regression's MSE on
    batches of 64 strays by 20 around 230 from one step to the next; its first window, a
    low draw at 214, put 1.1x at 236, and a rate far too small to move it read as a
    divergence at update 64: the bar is about 265 there, while a loss climbing to 7x is
    far past either; the rebound below is judged against the same noise). One
    window above it is a transient spike, which recovers at a high but workable learning
    rate; it is not stopped. One window whose mean is above `severe_factor` (10) x the
    untrained model's loss fires at once: no transient averages that over a window (the
    edge-of-stability classifier's below reaches 2.8, 1.2x ln 10), while waiting for a
    second window of a loss that went from 5.7 to 2,000 in one update cost a 90-update job
    (benchmarks/repair_quality.py's word LM at 1000x) five of them per launch and probe.
    None (LEGACY_DEFAULTS, and a warm-started job's: `initial_factor` None) turns both off;
    `severe_factor` None alone keeps the `patience`.

    Both miss a loss that climbs back part of the way it fell and stays there, when the
    first loss was high: a GPT-style LM at 1000x its rate fell from its first loss to 3.2
    and climbed to 5.7, finite, below its first loss and below 10x its best. So a window
    mean that is above `rebound_factor` x the lowest window mean and has climbed back
    more than `rebound_share` of the fall from the first window to it, `rebound_windows`
    windows in a row, fires too: a share of what was learned, lost and not regained
    (a healthy loss near 0 may double and still have lost nothing of it). None
    (LEGACY_DEFAULTS, and a warm-started job's, whose first loss is a trained model's)
    turns this off.

    The same `patience` holds for `factor` x the best: a classifier on SGD + momentum at the
    edge of stability drops to a loss of 0, has one window at 2.8 (above its untrained
    loss) and is back at 0 in the next; a divergence stays up. A non-finite mean fires at
    once. 1 (LEGACY_DEFAULTS): fire at the first window.
    """

    name = "DivergingLoss"
    num_steps = 5
    NOISE_BAND = 2.0  # a first window's mean up to this x the first loss is its noise
    NOISE_Z = 4.0  # standard errors of the difference of two windows' means: clear of noise
    LEGACY_DEFAULTS = {
        "min_loss_fraction": 0.0,
        "initial_factor": None,
        "patience": 1,
        "rebound_share": None,
    }
    # A warm-started job's first saved loss is a trained model's: above 1.1x it is a
    # schedule's transient, not worse than untrained (benchmarks/policy_comparison.py, late:
    # warm-started at the warmup's end, the rate rose 30x and the loss went 2.0 -> 2.3).
    WARM_START = {"initial_factor": None, "rebound_share": None}
    factor: float = 10.0
    min_loss_fraction: float = 0.1
    initial_factor: float | None = 1.1
    severe_factor: float | None = 10.0
    patience: int = 2
    rebound_factor: float = 1.2
    rebound_share: float | None = 0.25
    rebound_windows: int = 4

    def validate(self) -> None:
        super().validate()
        if not (math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"{self.name}: parameter 'factor' must be > 1, got {self.factor}")
        if self.initial_factor is not None and not (
            math.isfinite(self.initial_factor) and self.initial_factor > 0
        ):
            raise ValueError(
                f"{self.name}: parameter 'initial_factor' must be > 0, got {self.initial_factor}"
            )
        if self.severe_factor is not None and not (
            math.isfinite(self.severe_factor) and self.severe_factor > 1
        ):
            raise ValueError(
                f"{self.name}: parameter 'severe_factor' must be > 1, got {self.severe_factor}"
            )
        if self.patience < 1:
            raise ValueError(f"{self.name}: parameter 'patience' must be >= 1")
        if self.rebound_windows < 1:
            raise ValueError(f"{self.name}: parameter 'rebound_windows' must be >= 1")
        if self.rebound_share is not None and not 0 < self.rebound_share < 1:
            raise ValueError(
                f"{self.name}: parameter 'rebound_share' must be in (0, 1), "
                f"got {self.rebound_share}"
            )
        if not (math.isfinite(self.rebound_factor) and self.rebound_factor >= 1):
            raise ValueError(f"{self.name}: parameter 'rebound_factor' must be >= 1")

    def setup(self) -> None:
        super().setup()
        self._best: dict[ModeKeys, float] = {}
        self._initial: dict[ModeKeys, float] = {}  # the mode's first saved loss
        self._above: dict[ModeKeys, int] = {}  # windows in a row above the initial scale
        self._over_best: dict[ModeKeys, int] = {}  # windows in a row above factor x best
        self._rebound: dict[ModeKeys, int] = {}  # windows in a row climbed back (rebound_*)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if mode not in self._initial and (self.mode is None or mode.value == self.mode):
            loss = self.loss_at(step, mode)
            if loss is not None and math.isfinite(loss[1]):
                self._initial[mode] = loss[1]
        return super().invoke_at_step(step, mode)

    def window_ended(self, step: int, mode: ModeKeys, loss: str, mean: float) -> bool:
        if not math.isfinite(mean):
            message = f"mean {loss} over {self.num_steps} {mode.value} steps is not finite"
            return self.fire(step, mode, loss, f"{message} ({mean}) at step {step}")
        best = self._best.get(mode)
        first = self.first_mean(mode) or 0.0
        reference = None if best is None else max(best, self.min_loss_fraction * first)
        # A ratio means nothing for a loss that can reach 0 or go negative.
        over = reference is not None and reference > 0 and mean > self.factor * reference
        self._over_best[mode] = self._over_best.get(mode, 0) + 1 if over else 0
        if over and self._over_best[mode] >= self.patience:
            assert reference is not None and best is not None
            floor = "" if reference == best else f", floored at {reference:.4g}"
            times = f" for {self._over_best[mode]} windows in a row" if self.patience > 1 else ""
            message = (
                f"mean {loss} over the last {self.num_steps} {mode.value} steps is "
                f"{mean:.4g}, {mean / reference:.3g}x its best window mean {best:.4g}"
                f"{floor} (> {self.factor:g}x){times} at step {step}"
            )
            return self.fire(step, mode, loss, message)
        if self._above_initial(step, mode, loss, mean):
            return True
        if best is not None and self._rebounded(step, mode, loss, mean, best):
            return True
        self._best[mode] = mean if best is None else min(best, mean)
        return False

    def _above_initial(self, step: int, mode: ModeKeys, loss: str, mean: float) -> bool:
        initial, window = self._initial.get(mode), self.first_mean(mode)
        noise = 0.0  # a first window far above the first loss: its spread is the divergence
        if initial is not None and window is not None and window <= self.NOISE_BAND * initial:
            initial = max(initial, window)
            noise = self.noise_margin(mode)
        if self.initial_factor is None or initial is None or initial <= 0:
            return False
        bar = max(self.initial_factor * initial, initial + noise)
        self._above[mode] = self._above.get(mode, 0) + 1 if mean > bar else 0
        # past the noise bar too, so the message's "above {bar}" holds
        severe = self.severe_factor is not None and mean > max(bar, self.severe_factor * initial)
        if self._above[mode] < self.patience and not severe:
            return False
        clear = (
            f"{self.initial_factor:g}x"
            if bar == self.initial_factor * initial
            else (f"{self.NOISE_Z:g} standard errors of its first steps' noise above")
        )
        if self._above[mode] >= self.patience:
            how_long = f"for {self._above[mode]} windows in a row"
        else:
            how_long = f"{mean / initial:.3g}x it (> {self.severe_factor:g}x: at once)"
        message = (
            f"mean {loss} over the last {self.num_steps} {mode.value} steps is {mean:.4g}, "
            f"above {bar:.4g}, {clear} the untrained model's {initial:.4g} (its first saved "
            f"loss, or its first window's mean where that is its noise), {how_long}, at "
            f"step {step}"
        )
        return self.fire(step, mode, loss, message)

    def noise_margin(self, mode: ModeKeys) -> float:
        """NOISE_Z standard errors of the difference of two windows' means, from the
        batches' noise over the first steps: a window's mean must differ by more than
        this from another's to differ at all."""
        return self.NOISE_Z * self.early_noise(mode) * math.sqrt(2 / self.num_steps)

    def _rebounded(self, step: int, mode: ModeKeys, loss: str, mean: float, best: float) -> bool:
        first = self.first_mean(mode)
        if self.rebound_share is None or first is None or best <= 0 or first <= best:
            return False
        share = (mean - best) / (first - best)  # of the fall from the first window, regained
        # The best window is the lowest of many noisy ones: a fall to it, or a climb from
        # it, within the noise is no fall and no climb (a flat regression's MSE: best
        # 192, first 236, windows at 248 read as 128 % of the way back up).
        margin = self.noise_margin(mode)
        climbed = (
            mean > self.rebound_factor * best
            and share > self.rebound_share
            and min(first - best, mean - best) > margin
        )
        self._rebound[mode] = self._rebound.get(mode, 0) + 1 if climbed else 0
        if self._rebound[mode] < self.rebound_windows:
            return False
        message = (
            f"mean {loss} over the last {self.num_steps} {mode.value} steps is {mean:.4g}, "
            f"{mean / best:.3g}x its best window mean {best:.4g} (> {self.rebound_factor:g}x) "
            f"and {100 * share:.3g}% of the way back up to the first window's {first:.4g} "
            f"(> {100 * self.rebound_share:g}%) for {self._rebound[mode]} windows in a row, "
            f"at step {step}"
        )
        return self.fire(step, mode, loss, message)

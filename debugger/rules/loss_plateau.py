"""LossPlateau: the loss has stopped going down, measured against its own noise."""

from __future__ import annotations

import math

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule

# The standard error of a median of n normal samples is about this x sigma / sqrt(n).
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)
# sigma of normal noise from its median absolute deviation
MAD_TO_SIGMA = 1.4826


@register_rule
class LossPlateau(Rule):
    """Every `check_every` saved steps, takes the mode's trailing window of losses (the last
    `run_fraction` of the mode's saved steps, and at least `window` of them), splits it into
    an older and a newer half and compares their medians. The fall between them is
    measured with its standard error, from the window's own noise (the spread of each half
    around its median). Fires when, `patience` checks in a row, even the fall at the top of
    that range (the measured fall + `z` standard errors) is below `min_fall_percent` % of
    the newer median: the loss has stopped falling, and the window is long and calm
    enough to say so. A loss below `converged_fraction` x its first `check_every` steps'
    median has converged: not going further down is then Overtraining's question.
    `mode`: only that mode's losses (default: each mode separately).

    Why not LossNotDecreasing (a window of 20 against the best window, a fixed 0.1 %): a
    mini-batch loss that falls slowly (a char LM at its default rate: 2.328, 2.325, 2.293,
    2.288, 2.271, 2.267 per 100 steps) falls by less than its noise between short windows,
    and was stopped at step 985. Here a slow fall only fires once it is measured well
    enough to be called flat, and a window that grows with the run (its last half) keeps
    the fall between its halves in proportion to how long the run has had to fall. A
    schedule's step (a warmup's end, a decay) moves the loss for a few steps: a median
    over a long window is not moved by them.
    """

    name = "LossPlateau"
    READS = (reads.LOSSES,)
    window: int = 200
    run_fraction: float = 0.5
    check_every: int = 50
    min_fall_percent: float = 0.1
    z: float = 2.0
    patience: int = 2
    converged_fraction: float = 0.1
    mode: str | None = None

    def validate(self) -> None:
        for key in ("window", "check_every", "patience"):
            if getattr(self, key) < 1:
                raise ValueError(f"{self.name}: parameter {key!r} must be >= 1")
        if self.window < 4:
            raise ValueError(f"{self.name}: parameter 'window' must be >= 4")
        if not 0 < self.run_fraction <= 1:
            raise ValueError(f"{self.name}: parameter 'run_fraction' must be in (0, 1]")
        if not (math.isfinite(self.z) and self.z >= 0):
            raise ValueError(f"{self.name}: parameter 'z' must be >= 0")
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._losses: dict[ModeKeys, list[float]] = {}
        self._flat: dict[ModeKeys, int] = {}  # checks in a row that found it flat

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if self.mode is not None and mode.value != self.mode:
            return False
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        losses = self._losses.setdefault(mode, [])
        losses.append(loss[1])
        if len(losses) < self.window or len(losses) % self.check_every:
            return False
        return self._check(step, mode, loss[0], losses)

    def _check(self, step: int, mode: ModeKeys, name: str, losses: list[float]) -> bool:
        size = max(self.window, int(len(losses) * self.run_fraction))
        half = size // 2
        trailing = np.asarray(losses[-2 * half :], dtype=np.float64)
        if not np.isfinite(trailing).all():
            self._flat[mode] = 0  # non-finite losses are ExplodingTensor's and DivergingLoss's
            return False
        older, newer = trailing[:half], trailing[half:]
        old, new = float(np.median(older)), float(np.median(newer))
        start = float(np.median(losses[: self.check_every]))
        if start > 0 and new < self.converged_fraction * start:
            self._flat[mode] = 0
            return False
        spread = np.concatenate([older - old, newer - new])
        sigma = MAD_TO_SIGMA * float(np.median(np.abs(spread)))
        standard_error = MEDIAN_EFFICIENCY * sigma * math.sqrt(2 / half)
        fall = old - new
        most = fall + self.z * standard_error
        bar = self.min_fall_percent / 100 * abs(new)
        self._flat[mode] = self._flat.get(mode, 0) + 1 if most < bar else 0
        if self._flat[mode] < self.patience:
            return False
        percent = 100 * fall / abs(old) if old else 0.0
        message = (
            f"median {name} over the last {half} {mode.value} steps is {new:.4g} against "
            f"{old:.4g} over the {half} before: a fall of {fall:.3g} ({percent:.3g}%), at "
            f"most {most:.3g} with {self.z:g} standard errors ({standard_error:.2g} each), "
            f"below {self.min_fall_percent:g}% of the loss ({bar:.3g}) for {self._flat[mode]} "
            f"checks in a row, at step {step}"
        )
        return self.fire(step, mode, name, message)

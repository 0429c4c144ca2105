"""CheckInputImages: image inputs are not normalised."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class CheckInputImages(Rule):
    """Accumulates per-channel means of 4-d inputs (channel axis `channel`) until
    `threshold_samples` images were seen, then fires when a channel's mean is further than
    `threshold_mean` from 0. The hook's "inputs" collection saves them as "input".

    Default `threshold_mean` 1.0 (the managed service's 0.2 is LEGACY_DEFAULTS): images
    scaled to [0, 1] (pixels / 255, as the built-in job and most loaders feed them) have
    channel means near 0.5 and train fine; the mistake this rule exists for, raw 0-255
    pixels, has means near 100."""

    name = "CheckInputImages"
    LEGACY_DEFAULTS = {"threshold_mean": 0.2}
    threshold_mean: float = 1.0
    threshold_samples: int = 500
    channel: int = 1
    tensor_regex: str = "input$"

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def setup(self) -> None:
        self._sum: np.ndarray | None = None
        self._pixels = 0
        self._images = 0

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, None, self.tensor_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name in self.required_tensors(step, mode):
            images = np.asarray(self.value(name, step, mode), dtype=np.float64)
            if images.ndim != 4:
                continue
            per_channel = np.moveaxis(images, self.channel, -1).reshape(-1, images.shape[1])
            if self._sum is None or self._sum.shape[0] != per_channel.shape[1]:
                self._sum, self._pixels, self._images = np.zeros(per_channel.shape[1]), 0, 0
            self._sum += per_channel.sum(axis=0)
            self._pixels += per_channel.shape[0]
            self._images += images.shape[0]
            if self._images < self.threshold_samples:
                continue
            means = self._sum / self._pixels
            worst = int(np.abs(means).argmax())
            if abs(means[worst]) > self.threshold_mean:
                message = (
                    f"{name}: channel {worst} mean {means[worst]:.3g} over {self._images} "
                    f"images is further than {self.threshold_mean:g} from 0 (not normalised)"
                )
                return self.fire(step, mode, name, message)
        return False

"""GradientRatio (AUTOTRAINER): first- vs last-layer gradients say vanishing or exploding."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule
from remedy.debugger.rules.registry import register_rule


@register_rule
class GradientRatio(Rule):
    """r = mean |gradient| of the first layer's weight / that of the last layer's (layer
    order = the order the hook saved them, i.e. the model's parameter order; biases are left
    out). Vanishing: r < vanishing_ratio and first < vanishing_first. Exploding:
    r > exploding_ratio. Thresholds as published by AUTOTRAINER."""

    name = "GradientRatio"
    vanishing_ratio: float = 1e-3
    vanishing_first: float = 1e-4
    exploding_ratio: float = 70.0
    collection: str = "gradients"

    def layers(self) -> list[str]:
        return [
            n
            for n in self.trial.collection_order(self.collection)
            if not n.endswith("bias") and "::" not in n
        ]

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        layers = self.layers()
        return [layers[0], layers[-1]] if len(layers) >= 2 else []

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        names = self.required_tensors(step, mode)
        saved = set(self.trial.tensor_names(mode=mode, step=step))
        if len(names) < 2 or not set(names) <= saved:
            return False
        first = self.reduction(names[0], step, mode, "mean", abs=True)
        last = self.reduction(names[1], step, mode, "mean", abs=True)
        ratio = first / last if last else float("inf")
        where = f"{mode.value} step {step}"
        if ratio > self.exploding_ratio:
            message = (
                f"exploding gradients: |{names[0]}| / |{names[1]}| = {ratio:.3g} > "
                f"{self.exploding_ratio:g} at {where}"
            )
            return self.fire(step, mode, names[0], message)
        if ratio < self.vanishing_ratio and first < self.vanishing_first:
            message = (
                f"vanishing gradients: |{names[0]}| / |{names[1]}| = {ratio:.3g} < "
                f"{self.vanishing_ratio:g} and |{names[0]}| = {first:.3g} < "
                f"{self.vanishing_first:g} at {where}"
            )
            return self.fire(step, mode, names[0], message)
        return False

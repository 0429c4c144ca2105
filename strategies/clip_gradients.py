from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

FIRST_NORM = 1.0
SMALLEST_NORM = 0.1


@register_strategy
class ClipGradients(Strategy):
    """Clip the total gradient norm to 1.0, then tighten by 10x once: bounds every update
    without touching the model, so a run can warm-start."""

    name = "clip_gradients"
    addresses = ("ExplodingTensor", "DivergingLoss", "NonFiniteGradient", "OscillatingLoss")
    changes = ("grad_clip_norm",)
    explanation = "Clip the gradient norm so one bad batch cannot blow the weights up"

    def applies(self, spec: RunSpec) -> bool:
        norm = spec.role("grad_clip_norm")
        return norm is None or norm / 10 >= SMALLEST_NORM

    def apply(self, spec: RunSpec) -> RunSpec:
        norm = spec.role("grad_clip_norm")
        return spec.with_roles({"grad_clip_norm": FIRST_NORM if norm is None else norm / 10})

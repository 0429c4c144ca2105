from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy


@register_strategy
class LowerLR(Strategy):
    """Multiply the learning rate by 0.9 while the result stays above 0.001."""

    name = "lower_lr"
    changes = ("learning_rate",)
    counter = "num_learning_rate_adjustments"
    explanation = "Lower the learning rate by 10 %"

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("learning_rate") * 0.9 > 0.001

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"learning_rate": spec.role("learning_rate") * 0.9})

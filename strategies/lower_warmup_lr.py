from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy


@register_strategy
class LowerWarmupLR(Strategy):
    """Halve the warmup learning rate while warmup / 5 stays >= 1e-3 (5 halvings from 0.1)."""

    name = "lower_warmup_lr"
    changes = ("warmup_learning_rate",)
    counter = "num_warmup_adjustments"
    explanation = "Halve the warmup learning rate so the first epoch takes smaller steps"

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("warmup_learning_rate") / 5 >= 1e-3

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"warmup_learning_rate": spec.role("warmup_learning_rate") * 0.5})

from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

FLOOR = 1e-5  # below this a run does not learn in any budget we would give it


@register_strategy
class LowerLR10x(Strategy):
    """Divide the learning rate (and a warmup above it) by 10: one decisive step, where the
    seed's x0.9 needs twenty launches to get as far."""

    name = "lower_lr_10x"
    addresses = ("ExplodingTensor", "DivergingLoss", "NonFiniteGradient", "OscillatingLoss")
    changes = ("learning_rate", "warmup_learning_rate")
    explanation = "Divide the learning rate by 10"

    def applies(self, spec: RunSpec) -> bool:
        return spec.learning_rate / 10 >= FLOOR

    def apply(self, spec: RunSpec) -> RunSpec:
        lr = spec.learning_rate / 10
        return spec.model_copy(
            update={"learning_rate": lr, "warmup_learning_rate": min(spec.warmup_learning_rate, lr)}
        )

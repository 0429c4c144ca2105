from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

FLOOR = 1e-5  # below this a run does not learn in any budget we would give it


@register_strategy
class LowerLR10x(Strategy):
    """Divide the learning rate by 10 (and bring a warmup rate above it down to it, when the
    job has one): one decisive step, where the seed's x0.9 needs twenty launches."""

    name = "lower_lr_10x"
    changes = ("learning_rate", "warmup_learning_rate")
    optional = ("warmup_learning_rate",)
    explanation = "Divide the learning rate by 10"

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("learning_rate") / 10 >= FLOOR

    def apply(self, spec: RunSpec) -> RunSpec:
        lr = spec.role("learning_rate") / 10
        update = {"learning_rate": lr}
        if spec.has_role("warmup_learning_rate"):
            update["warmup_learning_rate"] = min(spec.role("warmup_learning_rate"), lr)
        return spec.with_roles(update)

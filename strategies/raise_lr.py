from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

CEILING = 1.0


@register_strategy
class RaiseLR(Strategy):
    """Multiply the learning rate by 10 (AUTOTRAINER's repair for slow convergence)."""

    name = "raise_lr"
    changes = ("learning_rate",)
    explanation = "Raise the learning rate by 10x so training moves faster"

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("learning_rate") * 10 <= CEILING

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"learning_rate": spec.role("learning_rate") * 10})

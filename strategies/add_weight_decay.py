from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

START = 1e-4
CEILING = 5e-3


@register_strategy
class AddWeightDecay(Strategy):
    """Double the weight decay (1e-4 when there is none) up to 5e-3: keeps weights small."""

    name = "add_weight_decay"
    changes = ("weight_decay",)
    explanation = "Raise weight decay to keep the weights small"

    def applies(self, spec: RunSpec) -> bool:
        return self._next(spec) <= CEILING

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"weight_decay": self._next(spec)})

    @staticmethod
    def _next(spec: RunSpec) -> float:
        decay = spec.role("weight_decay")
        return decay * 2 if decay > 0 else START

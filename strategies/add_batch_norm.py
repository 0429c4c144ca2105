from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy


@register_strategy
class AddBatchNorm(Strategy):
    """Add batch norm before each residual addition (stabilises the ELU ResNet)."""

    name = "add_batch_norm"
    changes = ("add_batch_norm",)
    changes_architecture = True
    counter = "num_batch_layer_adjustments"
    explanation = "Add batch normalisation before each residual addition"

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("add_batch_norm") == 0

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"add_batch_norm": 1})

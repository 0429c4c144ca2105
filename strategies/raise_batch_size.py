from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

CEILING = 1024


@register_strategy
class RaiseBatchSize(Strategy):
    """Double the batch size (up to 1024): less gradient noise for an oscillating loss."""

    name = "raise_batch_size"
    changes = ("batch_size",)
    explanation = "Double the batch size to smooth the gradient"

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("batch_size") * 2 <= CEILING

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"batch_size": spec.role("batch_size") * 2})

from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

MAX_EPOCHS = 5


@register_strategy
class LongerWarmup(Strategy):
    """One more epoch at the warmup learning rate (up to 5, and fewer than the run's epochs)."""

    name = "longer_warmup"
    addresses = ("ExplodingTensor", "DivergingLoss", "NonFiniteGradient")
    changes = ("warmup_epochs",)
    explanation = "Warm up for one more epoch before the full learning rate"

    def applies(self, spec: RunSpec) -> bool:
        return spec.warmup_epochs + 1 <= min(MAX_EPOCHS, spec.num_epochs - 1)

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.model_copy(update={"warmup_epochs": spec.warmup_epochs + 1})

from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

MAX_EPOCHS = 5


@register_strategy
class LongerWarmup(Strategy):
    """One more epoch at the warmup learning rate (up to 5, and fewer than the run's epochs
    when the job says how many)."""

    name = "longer_warmup"
    addresses = ("ExplodingTensor", "DivergingLoss", "NonFiniteGradient")
    changes = ("warmup_epochs",)
    reads = ("num_epochs",)
    explanation = "Warm up for one more epoch before the full learning rate"

    def applies(self, spec: RunSpec) -> bool:
        epochs = spec.role("num_epochs")  # None: a script that does not map it
        bound = MAX_EPOCHS if epochs is None else min(MAX_EPOCHS, epochs - 1)
        return spec.role("warmup_epochs") + 1 <= bound

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"warmup_epochs": spec.role("warmup_epochs") + 1})

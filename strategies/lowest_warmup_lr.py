from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy
from remedy.strategies.lower_warmup_lr import LowerWarmupLR


@register_strategy
class LowestWarmupLR(Strategy):
    """Every halving of the warmup learning rate the seed's ladder would make (while
    warmup / 5 >= 1e-3: 0.1 -> 0.003125), in one launch.

    An explosion in the first updates of a run is the warmup rate's: on the demo every
    halving but the last fails within 5 updates, so the seed spends a launch on each. The
    main learning rate is left alone: cutting it too (lower_lr_10x) leaves every later
    epoch training slowly (measured on the demo: 0.928 test accuracy against 0.998)."""

    name = "lowest_warmup_lr"
    changes = ("warmup_learning_rate",)
    reads = ("warmup_epochs",)
    counter = "num_warmup_adjustments"
    explanation = "Lower the warmup learning rate as far as the seed ladder's halvings go"

    def applies(self, spec: RunSpec) -> bool:
        # No warmup epoch (a job that maps the role and sets 0): its rate is never used.
        return spec.role("warmup_epochs") != 0 and LowerWarmupLR().applies(spec)

    def apply(self, spec: RunSpec) -> RunSpec:
        halve = LowerWarmupLR()
        while halve.applies(spec):
            spec = halve.apply(spec)
        return spec

from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

STEP = 0.2
CEILING = 0.5


@register_strategy
class AddDropout(Strategy):
    """Add dropout before the dense head (0.2, then +0.2 up to 0.5); no new parameters, so
    checkpoints still fit."""

    name = "add_dropout"
    changes = ("dropout",)
    explanation = "Add dropout before the classifier to regularise"

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("dropout") < CEILING

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"dropout": round(min(spec.role("dropout") + STEP, CEILING), 6)})

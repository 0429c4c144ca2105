from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

ORDER = ("he_normal", "lecun_normal", "xavier_uniform", "orthogonal")


@register_strategy
class ChangeInit(Strategy):
    """Move to the next initialisation in he_normal -> lecun_normal -> xavier_uniform ->
    orthogonal (restarts from scratch: a checkpoint would overwrite the new init)."""

    name = "change_init"
    changes = ("init",)
    explanation = "Initialise the weights differently"

    def applies(self, spec: RunSpec) -> bool:
        return ORDER.index(spec.role("init")) < len(ORDER) - 1

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"init": ORDER[ORDER.index(spec.role("init")) + 1]})

"""Switch the optimizer: one registered strategy per target optimizer.

Adaptive optimizers get a learning rate of at most 1e-3 (their usual scale): Adam at SGD's
0.1 diverges, so they need the learning rate as well (and lower a warmup rate when the job
has one). They share one small base class, so they live together here.
"""

from typing import ClassVar

from remedy.state_schema import RunSpec
from remedy.strategies.base import Strategy, register_strategy

ADAPTIVE_LR = 1e-3


class ChangeOptimizer(Strategy):
    target: ClassVar[str]
    changes: ClassVar[tuple[str, ...]] = ("optimizer",)  # a subclass changes more

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("optimizer") != self.target

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"optimizer": self.target})


class ChangeToAdaptive(ChangeOptimizer):
    changes = ("optimizer", "learning_rate", "warmup_learning_rate")
    optional = ("warmup_learning_rate",)

    def apply(self, spec: RunSpec) -> RunSpec:
        update = {
            "optimizer": self.target,
            "learning_rate": min(spec.role("learning_rate"), ADAPTIVE_LR),
        }
        if spec.has_role("warmup_learning_rate"):
            update["warmup_learning_rate"] = min(spec.role("warmup_learning_rate"), ADAPTIVE_LR)
        return spec.with_roles(update)


@register_strategy
class UseAdam(ChangeToAdaptive):
    name = "use_adam"
    target = "adam"
    explanation = "Switch to Adam (learning rate at most 1e-3)"


@register_strategy
class UseAdamW(ChangeToAdaptive):
    name = "use_adamw"
    target = "adamw"
    explanation = "Switch to AdamW (decoupled weight decay, learning rate at most 1e-3)"


@register_strategy
class UseMomentum(ChangeOptimizer):
    name = "use_momentum"
    target = "momentum"
    explanation = "Switch to SGD with momentum"


@register_strategy
class UseSGD(ChangeOptimizer):
    name = "use_sgd"
    target = "sgd"
    explanation = "Switch to plain SGD (no momentum)"

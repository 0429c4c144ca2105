"""Swap the activation of every block: one registered strategy per target activation.

They share one small base class, so the five live together here instead of five files
that would differ in a single word. SELU and ReLU come with their initialisation, when the
job lets strategies change it.
"""

from typing import ClassVar

from remedy.state_schema import Activation, RunSpec
from remedy.strategies.base import Strategy, register_strategy


class SwapActivation(Strategy):
    target: ClassVar[Activation]
    changes: ClassVar[tuple[str, ...]] = ("activation",)  # a subclass changes more
    changes_architecture = True  # same parameters, different function: no warm start

    def applies(self, spec: RunSpec) -> bool:
        return spec.role("activation") != self.target

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"activation": self.target})


class SwapActivationAndInit(SwapActivation):
    init: ClassVar[str]
    changes = ("activation", "init")
    optional = ("init",)

    def applies(self, spec: RunSpec) -> bool:
        new_init = spec.has_role("init") and spec.role("init") != self.init
        return super().applies(spec) or new_init

    def apply(self, spec: RunSpec) -> RunSpec:
        update: dict[str, str] = {"activation": self.target}
        if spec.has_role("init"):
            update["init"] = self.init
        return spec.with_roles(update)


@register_strategy
class UseSELU(SwapActivationAndInit):
    """SELU with LeCun-normal init: self-normalising (AUTOTRAINER's first repair)."""

    name = "use_selu"
    target = Activation.selu
    init = "lecun_normal"
    explanation = "Switch to SELU with LeCun-normal initialisation (self-normalising)"


@register_strategy
class UseReLU(SwapActivationAndInit):
    """ReLU with He-normal init."""

    name = "use_relu"
    target = Activation.relu
    init = "he_normal"
    explanation = "Switch to ReLU with He-normal initialisation"


@register_strategy
class UseLeakyReLU(SwapActivation):
    name = "use_leaky_relu"
    target = Activation.leaky_relu
    explanation = "Switch to LeakyReLU so no unit can die"


@register_strategy
class UseELU(SwapActivation):
    name = "use_elu"
    target = Activation.elu
    explanation = "Switch to ELU so no unit can die"


@register_strategy
class UseTanh(SwapActivation):
    name = "use_tanh"
    target = Activation.tanh
    explanation = "Switch to tanh, whose bounded output limits activation growth"

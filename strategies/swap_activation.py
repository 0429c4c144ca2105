"""Swap the activation of every block: one registered strategy per target activation.

They share one small base class, so the five live together here instead of five files
that would differ in a single word.
"""

from typing import ClassVar

from remedy.state_schema import Activation, RunSpec
from remedy.strategies.base import Strategy, register_strategy


class SwapActivation(Strategy):
    target: ClassVar[Activation]
    changes = ("activation",)
    changes_architecture = True  # same parameters, different function: no warm start

    def applies(self, spec: RunSpec) -> bool:
        return spec.activation != self.target

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.model_copy(update={"activation": self.target})


@register_strategy
class UseSELU(SwapActivation):
    """SELU with LeCun-normal init: self-normalising (AUTOTRAINER's first repair)."""

    name = "use_selu"
    target = Activation.selu
    addresses = ("ExplodingTensor", "VanishingGradient", "DeadRelu")
    changes = ("activation", "init")
    explanation = "Switch to SELU with LeCun-normal initialisation (self-normalising)"

    def applies(self, spec: RunSpec) -> bool:
        return spec.activation != self.target or spec.init != "lecun_normal"

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.model_copy(update={"activation": self.target, "init": "lecun_normal"})


@register_strategy
class UseReLU(SwapActivation):
    """ReLU with He-normal init."""

    name = "use_relu"
    target = Activation.relu
    addresses = ("ExplodingTensor", "VanishingGradient")
    changes = ("activation", "init")
    explanation = "Switch to ReLU with He-normal initialisation"

    def applies(self, spec: RunSpec) -> bool:
        return spec.activation != self.target or spec.init != "he_normal"

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.model_copy(update={"activation": self.target, "init": "he_normal"})


@register_strategy
class UseLeakyReLU(SwapActivation):
    name = "use_leaky_relu"
    target = Activation.leaky_relu
    addresses = ("DeadRelu",)
    explanation = "Switch to LeakyReLU so no unit can die"


@register_strategy
class UseELU(SwapActivation):
    name = "use_elu"
    target = Activation.elu
    addresses = ("DeadRelu",)
    explanation = "Switch to ELU so no unit can die"


@register_strategy
class UseTanh(SwapActivation):
    name = "use_tanh"
    target = Activation.tanh
    addresses = ("ExplodingTensor",)
    explanation = "Switch to tanh, whose bounded output limits activation growth"

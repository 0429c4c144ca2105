"""A configurable pre-activation ResNet for 32x32 images, as in the seed workflow.

The block is act -> conv3x3 -> act -> conv3x3 -> (optional BatchNorm) -> + shortcut.
Without the batch norm, the ELU variant of this block is prone to exploding gradients
(Shah et al. 2016); adding it before the residual addition stabilises training.
Module names (stem, stacks.0.0.conv1, head, ...) are what the tensor debugger reports.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "relu": nn.ReLU,
    "leaky_relu": nn.LeakyReLU,
    "selu": nn.SELU,
    "tanh": nn.Tanh,
}


def _lecun_normal(weight: torch.Tensor) -> None:
    # LeCun normal: variance 1 / fan_in, the init SELU's self-normalisation assumes.
    nn.init.kaiming_normal_(weight, mode="fan_in", nonlinearity="linear")


INITIALISERS: dict[str, Callable[[torch.Tensor], object]] = {
    "he_normal": lambda w: nn.init.kaiming_normal_(w, mode="fan_in", nonlinearity="relu"),
    "lecun_normal": _lecun_normal,
    "xavier_uniform": nn.init.xavier_uniform_,
    "orthogonal": nn.init.orthogonal_,
}


@dataclass
class ResNetConfig:
    depth: int = 20  # 6n + 2: n residual blocks per stack, 2 convs each, plus stem and head
    width: int = 16  # filters of the first stack; the next two use 2x and 4x
    activation: str = "elu"
    batch_norm: bool = False  # BatchNorm2d before each residual addition
    num_classes: int = 10
    in_channels: int = 3
    init: str = "he_normal"  # he_normal (the seed), lecun_normal, xavier_uniform, orthogonal
    dropout: float = 0.0  # before the dense head; adds no parameters (checkpoints still fit)


def check_init(name: str) -> None:
    if name not in INITIALISERS:
        raise ValueError(f"unknown init {name!r} (known: {', '.join(sorted(INITIALISERS))})")


def make_activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        known = ", ".join(sorted(ACTIVATIONS))
        raise ValueError(f"unknown activation {name!r} (known: {known})")
    return ACTIVATIONS[name]()


def blocks_per_stack(depth: int) -> int:
    if depth < 8 or (depth - 2) % 6 != 0:
        raise ValueError(f"depth must be 6n+2 with n >= 1 (e.g. 20, 32, 56), got {depth}")
    return (depth - 2) // 6


def conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1)


class ResidualBlock(nn.Module):
    def __init__(
        self, in_channels: int, out_channels: int, stride: int, config: ResNetConfig
    ) -> None:
        super().__init__()
        self.act1 = make_activation(config.activation)
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.act2 = make_activation(config.activation)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.bn = nn.BatchNorm2d(out_channels) if config.batch_norm else None
        # Only the first block of stacks 2 and 3 changes shape; it needs a projection.
        self.shortcut = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(self.act1(x))
        out = self.conv2(self.act2(out))
        if self.bn is not None:
            out = self.bn(out)
        residual = x if self.shortcut is None else self.shortcut(x)
        return out + residual


class ResNet(nn.Module):
    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        check_init(config.init)
        self.config = config
        n = blocks_per_stack(config.depth)
        self.stem = conv3x3(config.in_channels, config.width)
        stacks = []
        in_channels = config.width
        for i in range(3):
            out_channels = config.width * 2**i
            blocks = []
            for j in range(n):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(ResidualBlock(in_channels, out_channels, stride, config))
                in_channels = out_channels
            stacks.append(nn.Sequential(*blocks))
        self.stacks = nn.Sequential(*stacks)
        self.final_act = make_activation(config.activation)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(config.dropout) if config.dropout > 0 else None
        self.head = nn.Linear(in_channels, config.num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # He-normal (fan_in) by default as in the seed; BatchNorm keeps weight 1, bias 0.
        init = INITIALISERS[self.config.init]
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                init(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stacks(self.stem(x))
        x = self.pool(self.final_act(x)).flatten(1)
        if self.dropout is not None:
            x = self.dropout(x)
        return self.head(x)  # logits; softmax lives in the cross-entropy loss


def build_model(config: ResNetConfig) -> ResNet:
    return ResNet(config)

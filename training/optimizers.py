"""The optimizer a job trains with, by name: the strategies switch between these."""

from collections.abc import Iterable

import torch
from torch import nn

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


def build_optimizer(
    name: str,
    params: Iterable[nn.Parameter],
    lr: float,
    momentum: float,
    weight_decay: float,
) -> torch.optim.Optimizer:
    """sgd: plain SGD; momentum: SGD with `momentum` (the seed); adam; adamw.

    weight_decay is L2 added to the gradient for sgd/momentum/adam and decoupled for adamw,
    as each optimizer defines it.
    """
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.0, weight_decay=weight_decay)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r} (known: {', '.join(OPTIMIZERS)})")

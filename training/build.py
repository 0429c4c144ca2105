"""What the job and the replay of its repro bundles share: the model and optimizer that the
hyperparameters describe, and the gradient norm a step is judged by.

A bundle's step is replayed (training/replay.py) exactly as the job ran it only if both build
and measure it with the same code, so it lives here, below the job and the replay both.
"""

import torch
from torch import nn

from remedy.models import ResNetConfig, build_model
from remedy.state_schema import Hyperparameters
from remedy.training.optimizers import build_optimizer


def build_model_and_optimizer(
    config: Hyperparameters,
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The freshly initialised model and its optimizer, at the warmup learning rate."""
    model_config = ResNetConfig(
        depth=config.depth,
        width=config.width,
        activation=config.activation,
        batch_norm=bool(config.add_batch_norm),
        init=config.init,
        dropout=config.dropout,
    )
    model = build_model(model_config)
    optimizer = build_optimizer(
        config.optimizer,
        model.parameters(),
        lr=config.warmup_learning_rate,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
    )
    return model, optimizer


@torch.no_grad()
def total_grad_norm(model: nn.Module) -> float:
    """L2 norm of all gradients (0.0 when there are none), summed in float64 so that it is
    finite exactly when every gradient is (float32 squares overflow from |g| > 1.8e19)."""
    norms = [
        torch.linalg.vector_norm(p.grad, dtype=torch.float64)
        for p in model.parameters()
        if p.grad is not None
    ]
    return torch.linalg.vector_norm(torch.stack(norms)).item() if norms else 0.0

"""Small real trainings that show (or do not show) one training pathology each.

Every scenario trains a tiny torch model through the real Hook and returns the store path;
the rule tests then run the real evaluator over it. Each is a few dozen steps on CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from remedy.debugger import Hook, SaveConfig
from remedy.debugger.collections import CollectionSpec

EVERY_STEP = SaveConfig(save_interval=1)
ALL = ("losses", "gradients", "weights", "biases", "activations", "inputs", "metrics")


@dataclass
class Run:
    """What a scenario trained: the store and what the test saw on the side."""

    store: Path
    losses: list[float] = field(default_factory=list)
    eval_losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)


def mlp(sizes: list[int], activation: str = "ReLU", seed: int = 0) -> Any:
    """The MLP, its init drawn from `seed` (not from the global generator, whose state
    depends on which tests ran before in the process: a deep sigmoid's gradients vanished
    for some draws and not for others)."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layers: list[Any] = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(getattr(torch.nn, activation)())
        return torch.nn.Sequential(*layers)


def make_hook(store: Path, collections: tuple[str, ...] = ALL) -> Hook:
    specs = {"activations": CollectionSpec(save_inputs=True)}
    return Hook(store, collections=dict.fromkeys(collections, EVERY_STEP), collection_specs=specs)


def blobs(
    n: int,
    classes: int = 2,
    dim: int = 4,
    spread: float = 0.5,
    seed: int = 0,
    weights: list[float] | None = None,
) -> tuple[Any, Any]:
    """Gaussian blobs, one per class (well separated unless `spread` is large). The centres
    are the same for every seed: another seed draws fresh samples of the same task."""
    import torch

    centers = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1234)) * 3
    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor(weights or [1.0] * classes)
    y = torch.multinomial(p / p.sum(), n, replacement=True, generator=gen)
    x = centers[y] + spread * torch.randn(n, dim, generator=gen)
    return x, y


def fit(
    store: Path,
    model: Any,
    data: tuple[Any, Any],
    *,
    steps: int,
    lr: float,
    classify: bool = False,
    eval_data: tuple[Any, Any] | None = None,
    eval_every: int = 0,
    optimizer: str = "SGD",
    momentum: float = 0.0,
    batch: int | None = None,
    seed: int = 0,
    collections: tuple[str, ...] = ALL,
    before_step: Callable[[int], None] | None = None,
    lr_at: Callable[[int], float] | None = None,
) -> Run:
    """Train `model` on `data` (full batch unless `batch`), with an EVAL pass every
    `eval_every` steps; saves labels/predictions/accuracy for classifiers."""
    import torch

    torch.manual_seed(seed)
    if not isinstance(model, torch.nn.Module):
        model = model()  # a factory: built after seeding (mlp() draws from its own seed)
    hook = make_hook(store, collections)
    criterion = torch.nn.CrossEntropyLoss() if classify else torch.nn.MSELoss()
    kwargs = {"momentum": momentum} if optimizer == "SGD" else {}
    opt = getattr(torch.optim, optimizer)(model.parameters(), lr=lr, **kwargs)
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(opt)
    x, y = data
    run = Run(store)
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        if lr_at is not None:  # a learning-rate schedule
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
        model.train()
        if batch is None:
            xb, yb = x, y
        else:
            idx = torch.randint(0, len(x), (batch,), generator=gen)
            xb, yb = x[idx], y[idx]
        opt.zero_grad()
        out = model(xb)
        loss = criterion(out, yb)
        loss.backward()
        run.losses.append(loss.item())
        if classify:
            _save_classification(hook, out, yb, run.accuracies)
        opt.step()
        if eval_data is not None and eval_every and (step + 1) % eval_every == 0:
            model.eval()
            with torch.no_grad():
                out = model(eval_data[0])
                run.eval_losses.append(criterion(out, eval_data[1]).item())
                if classify:
                    _save_classification(hook, out, eval_data[1], [])
    hook.close()
    return run


def _save_classification(hook: Hook, out: Any, labels: Any, accuracies: list[float]) -> None:
    predictions = out.argmax(dim=1)
    accuracy = (predictions == labels).float().mean()
    accuracies.append(float(accuracy))
    hook.save_tensor("labels", labels, collection="metrics")
    hook.save_tensor("predictions", predictions, collection="metrics")
    hook.save_tensor("accuracy", accuracy, collection="metrics")


def regression(
    n: int = 64, dim: int = 4, noise: float = 0.1, seed: int = 0, scale: float = 1.0
) -> tuple[Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=gen) * scale
    w = torch.randn(dim, 1, generator=gen)
    return x, x @ w + noise * torch.randn(n, 1, generator=gen)


def friedman(n: int, seed: int = 0) -> tuple[Any, Any]:
    """Friedman's #1 regression (10 inputs, 5 of them used, unit noise): targets around
    14, so an untrained model's MSE is about 230, and on batches of 32 one step's loss
    strays by about 20 from the next."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 10, generator=gen)
    y = (
        10 * torch.sin(torch.pi * x[:, 0] * x[:, 1])
        + 20 * (x[:, 2] - 0.5) ** 2
        + 10 * x[:, 3]
        + 5 * x[:, 4]
        + torch.randn(n, generator=gen)
    )
    return x, y.unsqueeze(1)


def stall(seconds: float, at_step: int) -> Callable[[int], None]:
    """A before_step callback that hangs once, like a data loader waiting on a dead mount."""

    def before(step: int) -> None:
        if step == at_step:
            time.sleep(seconds)

    return before


def init_(
    model: Any,
    weight_std: float | None = None,
    bias: float | None = None,
    zero: bool = False,
    layers: slice = slice(None),
) -> Any:
    """Re-initialise the Linear layers selected by `layers` (a poor initialisation)."""
    import torch

    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][layers]
    with torch.no_grad():
        for m in linear:
            if zero:
                m.weight.zero_()
                m.bias.zero_()
            if weight_std is not None:
                m.weight.normal_(0.0, weight_std)
            if bias is not None:
                m.bias.fill_(bias)
    return model


def as_numpy(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def tiny_cnn() -> Any:
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 2),
    )


def images(n: int, raw: bool, seed: int = 0) -> tuple[Any, Any]:
    """8x8 RGB images of two classes (bright vs dark red channel): raw 0..255 pixel values,
    or normalised per channel as a data pipeline should."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=gen)
    x = torch.rand(n, 3, 8, 8, generator=gen) * 255.0
    x[:, 0] = x[:, 0] * 0.5 + 127.5 * y[:, None, None]
    if not raw:
        mean = x.mean(dim=(0, 2, 3), keepdim=True)
        std = x.std(dim=(0, 2, 3), keepdim=True)
        x = (x - mean) / std
    return x, y

"""A classifier whose settings all live in a YAML file, as many research repositories
keep them: `python train.py --config configs/spirals.yaml`. The command line names the file
and nothing else; the learning rate, the epochs and the model's width are keys in it. It
knows nothing of remedy.

    python train.py --config configs/spirals.yaml
"""

import argparse
import math

import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
args = parser.parse_args()
with open(args.config) as f:
    cfg = yaml.safe_load(f)

torch.manual_seed(cfg["seed"])


def spirals(n: int, arms: int, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`arms` interleaved spirals, n points each: a classic toy that needs a nonlinear model."""
    r = torch.linspace(0.1, 1.0, n).repeat(arms)
    arm = torch.arange(arms).repeat_interleave(n)
    theta = 2 * math.pi * r + 2 * math.pi * arm / arms
    x = torch.stack([r * torch.cos(theta), r * torch.sin(theta)], 1)
    return x + noise * torch.randn_like(x), arm


data = cfg["data"]
x, y = spirals(data["points_per_arm"], data["arms"], data["noise"])
order = torch.randperm(len(y))
test = order[: len(y) // 5]
train = order[len(y) // 5 :]
loader = DataLoader(
    TensorDataset(x[train], y[train]), batch_size=cfg["train"]["batch_size"], shuffle=True
)

layers: list[nn.Module] = []
width = 2
for hidden in cfg["model"]["hidden"]:
    layers += [nn.Linear(width, hidden), nn.Tanh()]
    width = hidden
model = nn.Sequential(*layers, nn.Linear(width, data["arms"]))

opt = cfg["optimizer"]
optimizer = torch.optim.Adam(model.parameters(), lr=opt["lr"], weight_decay=opt["weight_decay"])

for epoch in range(cfg["train"]["epochs"]):
    model.train()
    total = 0.0
    for inputs, labels in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(labels)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    print(f"epoch {epoch} train loss {total / len(train):.4f} test accuracy {accuracy:.3f}")

"""Fits a small linear model with torch.optim for --steps updates at --lr: a real job whose updates
the launcher's capture counts (so REMEDY_MAX_UPDATES bounds it, and holds it where the
backend can continue it)."""

import torch

from tests.jobs.entry_points.common import parse

flags, _ = parse()
steps = int(str(flags.get("steps", 100_000)))
lr = float(str(flags.get("lr", 0.05)))
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
x = torch.randn(64, 4)
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
for _ in range(steps):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()

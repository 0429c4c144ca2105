"""Full-batch gradient descent on two interleaved half-moons, as many tutorials train a
small classifier: every update sees the whole data set, so there is no batch noise. It
knows nothing of remedy.

    python train.py --lr 0.5 --epochs 800
"""

import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--momentum", type=float, default=0.0)
parser.add_argument("--epochs", type=int, default=800)
args = parser.parse_args()

torch.manual_seed(0)
n = 1000
t = torch.rand(n) * math.pi
upper = torch.stack([torch.cos(t), torch.sin(t)], 1)
lower = torch.stack([1 - torch.cos(t), 0.5 - torch.sin(t)], 1)
X = torch.cat([upper, lower]) + 0.1 * torch.randn(2 * n, 2)
y = torch.cat([torch.zeros(n), torch.ones(n)]).long()

model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
for epoch in range(args.epochs):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(X), y)
    loss.backward()
    optimizer.step()
    if epoch % 100 == 0 or epoch == args.epochs - 1:
        with torch.no_grad():
            accuracy = (model(X).argmax(1) == y).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.4f} accuracy {accuracy:.3f}")

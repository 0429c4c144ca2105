"""A regression script in a terse style: a noisy sine, a Tanh MLP, Adam, MultiStepLR decays
at 50 % and 75 % of the steps, MSE; no classes, no accuracy. It knows nothing of remedy.

    python fit.py --lr 3e-3 --steps 600
"""

import argparse

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--steps", type=int, default=600)
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()
torch.manual_seed(a.seed)
x = torch.rand(4096, 1) * 6 - 3
y = torch.sin(2 * x) + 0.3 * x + 0.05 * torch.randn_like(x)
net = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
opt = torch.optim.Adam(net.parameters(), lr=a.lr)
sched = torch.optim.lr_scheduler.MultiStepLR(opt, [a.steps // 2, 3 * a.steps // 4], 0.1)
for step in range(a.steps):
    idx = torch.randint(0, 4096, (64,))
    loss = nn.functional.mse_loss(net(x[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f}")
with torch.no_grad():
    print(f"final mse {nn.functional.mse_loss(net(x), y).item():.5f}")

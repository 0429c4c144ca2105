"""Classify synthetic 1-D signals (three waveform shapes plus noise) with a small 1-D CNN.
A Trainer class in the style of many research repos; RMSprop; flags via argparse."""

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_signals(n: int, length: int = 128, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, length)
    labels = torch.randint(0, 3, (n,), generator=g)
    freq = 3 + 4 * torch.rand(n, 1, generator=g)
    phase = 2 * math.pi * torch.rand(n, 1, generator=g)
    base = torch.sin(2 * math.pi * freq * t + phase)
    square = torch.sign(base)
    saw = 2 * ((freq * t + phase / (2 * math.pi)) % 1) - 1
    x = torch.where(labels[:, None] == 0, base, torch.where(labels[:, None] == 1, square, saw))
    x = x + 0.4 * torch.randn(n, length, generator=g)
    return x[:, None, :], labels


class Net(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, width, 7, padding=3),
            nn.GELU(),
            nn.MaxPool1d(2),
            nn.Conv1d(width, width, 5, padding=2),
            nn.GELU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.head = nn.Linear(width, 3)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Trainer:
    def __init__(self, args):
        self.args = args
        self.model = Net(args.width)
        self.opt = torch.optim.RMSprop(self.model.parameters(), lr=args.learning_rate, alpha=0.9)
        x, y = make_signals(3000)
        self.train = DataLoader(
            TensorDataset(x[:2500], y[:2500]), batch_size=args.batch, shuffle=True
        )
        self.val = (x[2500:], y[2500:])

    def fit(self):
        it = 0
        for epoch in range(self.args.n_epochs):
            for xb, yb in self.train:
                loss = nn.functional.cross_entropy(self.model(xb), yb)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                it += 1
                if it % 20 == 0:
                    print(f"[epoch {epoch} it {it}] loss={loss.item():.4f}")
            acc = self.evaluate()
            print(f"== epoch {epoch} done | val_acc {acc:.4f}")
        print(f"final val_acc {acc:.4f}")

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        x, y = self.val
        acc = (self.model(x).argmax(1) == y).float().mean().item()
        self.model.train()
        return acc


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--n-epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--width", type=int, default=16)
    torch.manual_seed(0)
    Trainer(p.parse_args()).fit()

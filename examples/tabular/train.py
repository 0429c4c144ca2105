"""A tabular classifier in the style of a notebook turned script: a CSV file, a DataLoader,
Adam under OneCycleLR (the rate warms up to --max_lr, then anneals to almost nothing),
gradient accumulation, early stopping on the validation loss, one JSON line per epoch, the
best model's state_dict saved. It knows nothing of remedy.

    python generate_data.py --out data.csv
    python train.py --csv data.csv
"""

import argparse
import csv
import json
import math
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

parser = argparse.ArgumentParser()
parser.add_argument("--csv", required=True)
parser.add_argument("--max_lr", type=float, default=3e-3)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch_size", type=int, default=64)
parser.add_argument("--grad_accum", type=int, default=1)
parser.add_argument("--patience", type=int, default=3)
parser.add_argument("--out", default="out")
parser.add_argument("--seed", type=int, default=7)
args = parser.parse_args()
torch.manual_seed(args.seed)

with open(args.csv, newline="") as f:
    header, *rows = list(csv.reader(f))
x = torch.tensor([[float(v) for v in row[:-1]] for row in rows])
y = torch.tensor([int(row[-1]) for row in rows])
x = (x - x.mean(0)) / (x.std(0) + 1e-6)
data = TensorDataset(x, y)
n_val = len(data) // 5
train_data, val_data = random_split(data, [len(data) - n_val, n_val])
train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True)
val_loader = DataLoader(val_data, batch_size=256)

model = nn.Sequential(
    nn.Linear(x.shape[1], 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
    nn.Linear(128, int(y.max()) + 1),
)  # fmt: skip
optimizer = torch.optim.Adam(model.parameters(), lr=args.max_lr / 25)
updates_per_epoch = math.ceil(len(train_loader) / args.grad_accum)
schedule = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, max_lr=args.max_lr, epochs=args.epochs, steps_per_epoch=updates_per_epoch
)
loss_fn = nn.CrossEntropyLoss()
best, epochs_without_gain = float("inf"), 0
os.makedirs(args.out, exist_ok=True)
for epoch in range(args.epochs):
    model.train()
    for i, (xb, yb) in enumerate(train_loader):
        (loss_fn(model(xb), yb) / args.grad_accum).backward()
        if (i + 1) % args.grad_accum == 0 or i + 1 == len(train_loader):
            optimizer.step()
            optimizer.zero_grad()
            if schedule.last_epoch + 1 < schedule.total_steps:
                schedule.step()
    model.eval()
    with torch.no_grad():
        val_loss = sum(loss_fn(model(xb), yb).item() * len(yb) for xb, yb in val_loader) / n_val
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader)
    print(json.dumps({"epoch": epoch, "val_loss": round(val_loss, 5), "val_acc": correct / n_val}))
    if val_loss < best:
        best, epochs_without_gain = val_loss, 0
        torch.save(model.state_dict(), os.path.join(args.out, "best.pt"))
    else:
        epochs_without_gain += 1
        if epochs_without_gain >= args.patience:
            print("early stopping")
            break

"""A classifier trained the way fine-tuning scripts train: a step budget rather than
epochs, SGD with momentum, the rate warmed up linearly over the first --warmup-ratio of
the steps and then decayed linearly to 0 (transformers' get_linear_schedule_with_warmup,
written with LambdaLR). Its data: ten overlapping Gaussian classes in 32 dimensions, made
from a fixed seed. It knows nothing of remedy.

    python train.py --learning-rate 0.02

At its own rate it ends at a test accuracy of about 0.77; past about 0.3 its ReLUs die
or its loss blows up once the warmup takes the rate there.
"""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--learning-rate", type=float, default=0.02)
parser.add_argument("--warmup-ratio", type=float, default=0.3)
parser.add_argument("--num-train-steps", type=int, default=400)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--logging-steps", type=int, default=50)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

data = torch.Generator().manual_seed(123)
centres = torch.randn(10, 32, generator=data) * 0.45
labels = torch.randint(0, 10, (8000,), generator=data)
inputs = centres[labels] + torch.randn(8000, 32, generator=data)
train_x, train_y, test_x, test_y = inputs[:6000], labels[:6000], inputs[6000:], labels[6000:]

torch.manual_seed(args.seed)
model = nn.Sequential(
    nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
)  # fmt: skip
optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
warmup_steps = int(args.warmup_ratio * args.num_train_steps)


def linear_with_warmup(step: int) -> float:
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    return max(0.0, (args.num_train_steps - step) / max(1, args.num_train_steps - warmup_steps))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_with_warmup)
for step in range(args.num_train_steps):
    batch = torch.randint(0, len(train_x), (args.batch_size,))
    loss = nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if step % args.logging_steps == 0:
        print(f"step {step} | loss {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.3g}")

with torch.no_grad():
    accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
print(f"eval_accuracy = {accuracy:.4f}")

"""An MLP classifier written the way the cloud service's PyTorch script mode expects.

Flags with its own names (--learning-rate, --accumulate), torch.optim, gradient
accumulation, optional bfloat16 autocast on CPU, and the model saved to SM_MODEL_DIR. The
data are Gaussian blobs made from --seed, so nothing is downloaded. It knows nothing about
remedy: remedy runs it unchanged, as the cloud service would.

    python train.py --epochs 3 --learning-rate 0.05 --accumulate 2
"""

import argparse
import json
import os

import torch
import torch.nn as nn


def blobs(n: int, classes: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(classes, dim, generator=generator)
    labels = torch.randint(0, classes, (n,), generator=generator)
    points = centres[labels] + torch.randn(n, dim, generator=generator)
    return points, labels


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--accumulate", type=int, default=1, help="backward passes per update")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16 on CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    x, y = blobs(2048, 5, 16, args.seed)
    x_test, y_test = blobs(512, 5, 16, args.seed)  # same centres: same seed
    model = nn.Sequential(nn.Linear(16, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 5))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        order = torch.randperm(len(x))
        for i, start in enumerate(range(0, len(x), args.batch_size)):
            batch = order[start : start + args.batch_size]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = loss_fn(model(x[batch]), y[batch]) / args.accumulate
            loss.backward()
            if (i + 1) % args.accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(json.dumps({"epoch": epoch, "loss": loss.item(), "accuracy": accuracy}), flush=True)
    os.makedirs(args.model_dir, exist_ok=True)
    torch.save(model, os.path.join(args.model_dir, "model.pt"))


if __name__ == "__main__":
    main()

"""Sentence classification written the way Hugging Face Accelerate's nlp_example.py is.

An Accelerator prepares the model, the AdamW optimizer, the DataLoaders and a warmup-then-
linear-decay schedule; gradients accumulate over two batches inside
`accelerator.accumulate`; `accelerator.backward` replaces `loss.backward()`; the test
accuracy is gathered with `gather_for_metrics` and printed after each epoch. The data are
synthetic sentences whose class shows in a few marker words, made from fixed seeds, so
nothing is downloaded. It knows nothing about remedy: remedy runs it unchanged.

    python train.py --learning_rate 1e-3 --num_epochs 4
    accelerate launch train.py --learning_rate 1e-3
"""

import argparse
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB, LENGTH, CLASSES = 500, 24, 4


def make_data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    tokens = torch.randint(0, VOCAB, (n, LENGTH), generator=g)
    # each class has 20 marker words; a sentence carries 3 of its class's markers
    markers = (labels.unsqueeze(1) * 20 + torch.randint(0, 20, (n, 3), generator=g)) % VOCAB
    tokens[:, :3] = markers
    return TensorDataset(tokens, labels)


class BagClassifier(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, dim)
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, CLASSES))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


def training_function(config: dict[str, Any], args: argparse.Namespace) -> None:
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    set_seed(config["seed"])
    train_dl = DataLoader(make_data(4000, 0), batch_size=config["batch_size"], shuffle=True)
    eval_dl = DataLoader(make_data(1000, 1), batch_size=256)
    model = BagClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=0.01)
    total = config["num_epochs"] * len(train_dl) // args.gradient_accumulation_steps
    warmup = total // 10
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (total - s) / (total - warmup))
    )
    model, optimizer, train_dl, eval_dl, schedule = accelerator.prepare(
        model, optimizer, train_dl, eval_dl, schedule
    )
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(config["num_epochs"]):
        model.train()
        for tokens, labels in train_dl:
            with accelerator.accumulate(model):
                loss = loss_fn(model(tokens), labels)
                accelerator.backward(loss)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
        model.eval()
        correct = seen = 0
        for tokens, labels in eval_dl:
            with torch.no_grad():
                predictions = model(tokens).argmax(dim=-1)
            predictions, labels = accelerator.gather_for_metrics((predictions, labels))
            correct += (predictions == labels).sum().item()
            seen += labels.numel()
        accelerator.print(f"epoch {epoch}:", {"accuracy": correct / seen, "loss": loss.item()})


def main() -> None:
    parser = argparse.ArgumentParser(description="Simple example of training script.")
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--num_epochs", type=int, default=4)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2)
    args = parser.parse_args()
    config = {"lr": args.learning_rate, "num_epochs": args.num_epochs, "seed": 42, "batch_size": 16}
    training_function(config, args)


if __name__ == "__main__":
    main()

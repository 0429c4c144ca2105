"""A char-level style trainer with argparse: explicit booleans (--shuffle False, parsed as
text the way the cloud toolkit passes them), a store_true switch (--verbose), its own work
folder (--work-dir, where it writes model.pt and args.json) and a checkpoint to resume from
(--resume FOLDER holding model.pt). A tiny bigram model of a fixed text.

    python train.py --lr 0.5 --steps 60 --shuffle False --verbose --work-dir work
"""

import argparse
import json
import os

import torch

TEXT = "the quick brown fox jumps over the lazy dog. " * 40


def boolean(text: str) -> bool:
    if text not in ("True", "False", "true", "false"):
        raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")
    return text in ("True", "true")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shuffle", type=boolean, default=True)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--work-dir", default="work")
    parser.add_argument("--resume", default=None, help="a folder holding model.pt")
    args = parser.parse_args()

    os.makedirs(args.work_dir, exist_ok=True)
    with open(os.path.join(args.work_dir, "args.json"), "w") as f:
        json.dump(vars(args), f)
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(c) for c in TEXT])
    torch.manual_seed(0)
    model = torch.nn.Embedding(len(chars), len(chars))
    if args.resume:
        model.load_state_dict(torch.load(os.path.join(args.resume, "model.pt")))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        if args.shuffle:
            starts = torch.randint(0, len(data) - 1, (args.batch_size,))
        else:  # in order, wrapping around
            starts = (torch.arange(args.batch_size) + step * args.batch_size) % (len(data) - 1)
        loss = torch.nn.functional.cross_entropy(model(data[starts]), data[starts + 1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.verbose and step % 20 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    torch.save(model.state_dict(), os.path.join(args.work_dir, "model.pt"))


if __name__ == "__main__":
    main()

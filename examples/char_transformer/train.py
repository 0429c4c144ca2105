"""A character-level transformer in the style of the popular single-file char models.

One text file, characters as tokens, a small causal transformer, torch.optim.AdamW at a
constant learning rate, gradient clipping only when asked (--grad-clip > 0), the loss
printed every --log-every steps and the validation loss at the end. It knows nothing about
remedy: remedy runs it unchanged.

    python train.py --data input.txt --max-steps 300 --learning-rate 1e-3
"""

import argparse
import math
import time

import torch
import torch.nn as nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CharModel(nn.Module):
    def __init__(self, vocab: int, context: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=idx.device), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def main() -> None:
    parser = argparse.ArgumentParser(description="character-level transformer")
    parser.add_argument("--data", required=True, help="a text file")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--grad-clip", type=float, default=0.0, help="0: no clipping")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    with open(args.data) as handle:
        text = handle.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train, valid = data[:split], data[split:]

    def batch(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(source) - args.context - 1, (args.batch_size,))
        x = torch.stack([source[s : s + args.context] for s in starts])
        y = torch.stack([source[s + 1 : s + 1 + args.context] for s in starts])
        return x, y

    model = CharModel(len(chars), args.context, args.width, args.layers, args.heads)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay
    )
    started = time.time()
    for step in range(args.max_steps):
        x, y = batch(train)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        if step % args.log_every == 0:
            print(
                f"step {step}: loss {loss.item():.4f} ({time.time() - started:.1f} s)", flush=True
            )

    model.eval()
    with torch.no_grad():
        losses = []
        for _ in range(20):
            x, y = batch(valid)
            logits = model(x)
            losses.append(F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)).item())
    val = sum(losses) / len(losses)
    print(f"final val loss {val:.4f} (uniform guess {math.log(len(chars)):.4f})", flush=True)


if __name__ == "__main__":
    main()

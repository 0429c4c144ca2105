"""A GPT-style language model trainer in the style of the popular minimal GPT repositories.

Word tokens from a text folder (train.txt, valid.txt), a small GPT (causal self-attention
written out, weight tying), AdamW with decayed and undecayed parameter groups, a learning
rate that warms up linearly for --warmup_iters and decays by a cosine to --min_lr at
--lr_decay_iters, gradient clipping at --grad_clip (0: off), and "iter N: loss X" lines
and periodic "step N: train loss X, val loss Y" evaluations. It knows nothing about
remedy: remedy runs it unchanged.

    python train.py --data data --max_iters 300 --learning_rate 6e-3 --min_lr 6e-4
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(
        self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def get_lr(it: int, args: argparse.Namespace) -> float:
    """Linear warmup, then cosine decay to min_lr, then min_lr."""
    if it < args.warmup_iters:
        return args.learning_rate * (it + 1) / (args.warmup_iters + 1)
    if it > args.lr_decay_iters:
        return args.min_lr
    ratio = (it - args.warmup_iters) / max(args.lr_decay_iters - args.warmup_iters, 1)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return args.min_lr + coeff * (args.learning_rate - args.min_lr)


def main() -> None:
    parser = argparse.ArgumentParser(description="GPT-style language model")
    parser.add_argument("--data", required=True, help="folder with train.txt and valid.txt")
    parser.add_argument("--out_dir", default="out")
    parser.add_argument("--max_iters", type=int, default=300)
    parser.add_argument("--learning_rate", type=float, default=6e-3)
    parser.add_argument("--min_lr", type=float, default=6e-4)
    parser.add_argument("--warmup_iters", type=int, default=20)
    parser.add_argument("--lr_decay_iters", type=int, default=300)
    parser.add_argument("--weight_decay", type=float, default=0.1)
    parser.add_argument("--beta2", type=float, default=0.99)
    parser.add_argument("--grad_clip", type=float, default=1.0, help="0: off")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--block_size", type=int, default=32)
    parser.add_argument("--n_layer", type=int, default=2)
    parser.add_argument("--n_head", type=int, default=4)
    parser.add_argument("--n_embd", type=int, default=48)
    parser.add_argument("--eval_interval", type=int, default=100)
    parser.add_argument("--log_interval", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    words: dict[str, int] = {}
    splits = {}
    for split in ("train", "valid"):
        with open(os.path.join(args.data, f"{split}.txt")) as handle:
            tokens = handle.read().replace("\n", " <eos> ").split()
        splits[split] = torch.tensor([words.setdefault(w, len(words)) for w in tokens])

    def get_batch(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        data = splits[split]
        ix = torch.randint(len(data) - args.block_size - 1, (args.batch_size,))
        x = torch.stack([data[i : i + args.block_size] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + args.block_size] for i in ix])
        return x, y

    model = GPT(len(words), args.block_size, args.n_layer, args.n_head, args.n_embd)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.learning_rate,
        betas=(0.9, args.beta2),
    )

    @torch.no_grad()
    def estimate_loss() -> dict[str, float]:
        model.eval()
        out = {
            split: sum(model(*get_batch(split)).item() for _ in range(10)) / 10 for split in splits
        }
        model.train()
        return out

    started = time.time()
    for it in range(args.max_iters + 1):
        lr = get_lr(it, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if it % args.eval_interval == 0 or it == args.max_iters:
            losses = estimate_loss()
            print(
                f"step {it}: train loss {losses['train']:.4f}, val loss {losses['valid']:.4f}",
                flush=True,
            )
        if it == args.max_iters:
            break
        loss = model(*get_batch("train"))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        if it % args.log_interval == 0:
            print(
                f"iter {it}: loss {loss.item():.4f}, lr {lr:.2e}, {time.time() - started:.1f} s",
                flush=True,
            )
    os.makedirs(args.out_dir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.out_dir, "ckpt.pt"))


if __name__ == "__main__":
    main()

"""A small variational autoencoder on 8x8 digit-like images, written the way a research
notebook turned script often is: a config dataclass filled from argparse, the `logging`
module, tqdm progress bars, SGD with momentum under ReduceLROnPlateau, gradient values
clipped, a checkpoint each epoch. Data: a .npz of images in [0, 1] (make_digits.py).

    python make_digits.py --out digits.npz
    python train.py --data digits.npz --lr 0.01 --epochs 8
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import asdict, dataclass, fields

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

log = logging.getLogger("vae")


@dataclass
class Config:
    data: str = "digits.npz"
    latent: int = 8
    hidden: int = 128
    batch_size: int = 64
    epochs: int = 8
    lr: float = 0.01
    momentum: float = 0.9
    clip_value: float = 5.0
    seed: int = 0
    out_dir: str = "vae-out"


class VAE(nn.Module):
    def __init__(self, pixels: int, hidden: int, latent: int) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(pixels, hidden), nn.Tanh())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.Tanh(), nn.Linear(hidden, pixels))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def elbo_loss(
    logits: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor
) -> torch.Tensor:
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return (recon + kl) / x.shape[0]


def parse() -> Config:
    parser = argparse.ArgumentParser()
    for f in fields(Config):
        parser.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    return Config(**vars(parser.parse_args()))


def main() -> None:
    cfg = parse()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    log.info("config %s", json.dumps(asdict(cfg)))
    torch.manual_seed(cfg.seed)
    images = np.load(cfg.data)["images"].astype(np.float32)
    x = torch.from_numpy(images.reshape(len(images), -1))
    split = int(0.9 * len(x))
    train = DataLoader(TensorDataset(x[:split]), batch_size=cfg.batch_size, shuffle=True)
    test = x[split:]
    model = VAE(x.shape[1], cfg.hidden, cfg.latent)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
    os.makedirs(cfg.out_dir, exist_ok=True)
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        bar = tqdm(train, desc=f"epoch {epoch}", leave=False)
        for (batch,) in bar:
            opt.zero_grad()
            logits, mu, logvar = model(batch)
            loss = elbo_loss(logits, batch, mu, logvar)
            loss.backward()
            nn.utils.clip_grad_value_(model.parameters(), cfg.clip_value)
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.2f}")
        model.eval()
        with torch.no_grad():
            logits, mu, logvar = model(test)
            test_loss = elbo_loss(logits, test, mu, logvar).item()
        sched.step(test_loss)
        log.info(
            "epoch %d test_elbo_loss %.4f lr %.3g", epoch, test_loss, opt.param_groups[0]["lr"]
        )
        torch.save(
            {"model": model.state_dict(), "epoch": epoch}, os.path.join(cfg.out_dir, "ckpt.pt")
        )
    print(json.dumps({"test_elbo_loss": test_loss}))


if __name__ == "__main__":
    main()

"""A data-parallel classifier written the way PyTorch's DDP tutorial writes one.

torchrun starts it once per process; each process trains on its own shard of the data
(DistributedSampler) and DistributedDataParallel averages the gradients, over the gloo
backend, so it runs on CPUs. The data are Gaussian blobs made from --seed, so nothing is
downloaded. It knows nothing about remedy: remedy runs it unchanged.

    torchrun --standalone --nproc-per-node 2 train.py --epochs 2 --learning-rate 0.05
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def blobs(n: int, classes: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(classes, dim, generator=generator)
    labels = torch.randint(0, classes, (n,), generator=generator)
    points = centres[labels] + torch.randn(n, dim, generator=generator)
    return points, labels


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    args = parser.parse_args()

    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR/PORT from torchrun
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    data = TensorDataset(*blobs(1024, 5, 16, args.seed))
    sampler = DistributedSampler(data, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = nn.Sequential(nn.Linear(16, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 5))
    model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(json.dumps({"epoch": epoch, "loss": loss.item()}), flush=True)
    if rank == 0:
        os.makedirs(args.model_dir, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(args.model_dir, "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

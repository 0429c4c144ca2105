"""A trainer in the style of single-file GPT training scripts: module-level defaults, then
`exec(open("configurator.py").read())`, which takes a config file and --key=value overrides.
A linear model on random data, with a warmup and cosine schedule from learning_rate down to
min_lr; it writes its config and its checkpoint into out_dir. It knows nothing of remedy.

    python train.py config/tiny.py --learning_rate=0.1 --compile=False
"""

import json
import math
import os

import torch

# defaults, overridden by config files and --key=value
out_dir = "out"
max_iters = 400
warmup_iters = 20
lr_decay_iters = 400
learning_rate = 0.1
min_lr = 0.01
batch_size = 32
compile = True  # noqa: A001 (the name such trainers use)
seed = 1337
config_keys = [
    k
    for k, v in globals().items()
    if not k.startswith("_") and isinstance(v, (int, float, bool, str))
]
exec(open("configurator.py").read())
config = {k: globals()[k] for k in config_keys}


def get_lr(it: int) -> float:
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config, f)
torch.manual_seed(seed)
true_weights = torch.randn(8, 1)
model = torch.nn.Linear(8, 1)
if compile:
    model = torch.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
for it in range(max_iters):
    for group in optimizer.param_groups:
        group["lr"] = get_lr(it)
    x = torch.randn(batch_size, 8)
    y = x @ true_weights + 0.1 * torch.randn(batch_size, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % 20 == 0:
        print(f"iter {it}: loss {loss.item():.4f}, lr {get_lr(it):.4g}", flush=True)
torch.save({"model": model.state_dict(), "config": config}, os.path.join(out_dir, "ckpt.pt"))

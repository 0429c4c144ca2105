"""What the NaN guard costs per training step: ELU ResNet-20 on CPU, guard off vs on.

    .venv/bin/python benchmarks/nan_guard_overhead.py [--steps 40 --threads 1]

One process, one model: training steps alternate one by one between nan_guard "off" and
"stop" (so load from other processes hits both alike), on synthetic data at the
seed's width 16 and batch 128 (batch norm on: its buffers are what the guard copies per
step; learning rate 0.01 so that no step is non-finite). The step is the job's own: forward,
backward, the float64 gradient norm the job logs anyway, the update. Guard on adds
before_step (RNG state + buffer copies), passes (two float checks) and, once per epoch of
5000 images, the contact-trace file. Prints the median step time of each mode and the ratio,
and the guard's own calls timed alone over many repetitions, as a share of the step.
Never asserts anything: it prints figures.

Measured 2026-11-21 on the shared 2-core machine (load average 6-7 from other work, 1 thread):
  step time off 1991 ms, on 1901 ms: ratio 0.95 (an earlier run in blocks of 8: 1.14; at this
  load whole-step differences are noise of +-15 %, either sign)
  guard calls alone: 350-720 us per step = 0.02-0.04 % of a step
  float64 gradient norm, logged anyway (the check's input): 1.8-4.5 ms = 0.11-0.22 % of a step
So the guard costs well under the 2 % target: about 0.04 %, 0.3 % even if the job did not
already compute the gradient norm. The bundle and replay cost only on a failing step.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remedy.state_schema import Hyperparameters  # noqa: E402
from remedy.training.build import build_model_and_optimizer, total_grad_norm  # noqa: E402
from remedy.training.data import make_synthetic  # noqa: E402
from remedy.training.guard import NanGuard  # noqa: E402

TRAIN_SAMPLES = 5000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per mode")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    config = Hyperparameters(
        depth=20, width=16, activation="elu", add_batch_norm=1, batch_size=args.batch_size,
        warmup_learning_rate=0.01, learning_rate=0.01,
    )  # fmt: skip
    data, _ = make_synthetic(TRAIN_SAMPLES, 10)
    model, optimizer = build_model_and_optimizer(config)
    criterion = nn.CrossEntropyLoss()
    shuffle = torch.Generator().manual_seed(0)
    order = torch.randperm(len(data), generator=shuffle)
    batches = order.split(config.batch_size)
    steps_per_epoch = len(batches)
    out = Path(tempfile.mkdtemp(prefix="nan-guard-bench-"))
    guard = NanGuard(config, out, model, optimizer, data, shuffle)
    model.train()

    def timed_step(guarded: bool, step: int) -> float:
        started = time.perf_counter()
        batch = batches[step % steps_per_epoch]
        if guarded and step % steps_per_epoch == 0:
            guard.new_epoch(step // steps_per_epoch, step + 1, order)
        if guarded:
            guard.before_step()
        loss = criterion(model(data.images[batch]), data.labels[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = total_grad_norm(model)  # the job logs it with or without the guard
        value = loss.item()
        if not guarded or guard.passes(step + 1, 0, value, grad_norm, batch):
            optimizer.step()
        return time.perf_counter() - started

    for step in range(2):
        timed_step(False, step)  # warm-up: allocator, first-call costs
    times: dict[bool, list[float]] = {False: [], True: []}
    for step in range(2, 2 + 2 * args.steps):
        guarded = step % 2 == 1
        times[guarded].append(timed_step(guarded, step))
    off, on = statistics.median(times[False]), statistics.median(times[True])

    # The guard's own calls, timed alone: far below the noise of a whole step.
    repeats = 2000
    batch = batches[0]
    started = time.perf_counter()
    for i in range(repeats):
        guard.before_step()
        guard.passes(i + 1, 0, 1.0, 1.0, batch)
    per_step = (time.perf_counter() - started) / repeats
    started = time.perf_counter()
    for epoch in range(20):
        guard.new_epoch(epoch, 1, order)
    per_step += (time.perf_counter() - started) / 20 / steps_per_epoch
    grads = time.perf_counter()
    for _ in range(100):
        total_grad_norm(model)
    norm = (time.perf_counter() - grads) / 100

    print(
        f"ELU ResNet-20 width 16, batch {config.batch_size}, batch norm, {args.threads} thread(s), "
        f"{args.steps} steps per mode, alternating"
    )
    print(f"step time, guard off: {off * 1000:.1f} ms (median)")
    print(f"step time, guard on:  {on * 1000:.1f} ms")
    print(f"ratio on/off: {on / off:.4f} ({(on / off - 1) * 100:+.2f} %, includes load noise)")
    print(
        f"guard calls alone: {per_step * 1e6:.0f} us per step = {per_step / off * 100:.3f} % "
        "of a step (before_step + passes + trace file per epoch)"
    )
    print(
        f"float64 gradient norm (logged with or without the guard; the guard's check if it "
        f"were not): {norm * 1000:.2f} ms = {norm / off * 100:.2f} % of a step"
    )


if __name__ == "__main__":
    main()

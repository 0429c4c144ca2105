"""Cost of the step files' checksums (crc32 of each tensor's bytes and of the header) on
the capture side, and on the reading side.

    .venv/bin/python benchmarks/checksum_overhead.py [--steps 30] [--repeats 5]

The model of benchmarks/debugger_overhead.py (CPU ELU ResNet-20, batch 32, SGD, 1 thread),
capturing weights + gradients + losses every step, with and without checksums
(store.WRITE_CHECKSUMS), interleaved `--repeats` times; the median of each is printed with
the ratio. Three figures per setting:
  writer   CPU seconds the writer thread spends per step file (encode + checksums + write),
           timed around store.write_step alone
  step     wall time of a training step, close() included (the writer's backlog counts)
  read     CPU seconds to read back every tensor of the store with a fresh trial (the
           checksums are verified on each read when the files have them)
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from remedy.debugger import Hook, SaveConfig, create_trial, store  # noqa: E402
from remedy.models.resnet import ResNetConfig, build_model  # noqa: E402

BATCH = 32
WARMUP = 3


def run(steps: int, out_dir: Path, checksums: bool) -> dict[str, float]:
    store.WRITE_CHECKSUMS = checksums
    writes: list[float] = []
    original = store.write_step

    def timed_write_step(*args: Any, **kwargs: Any) -> Path:
        started = time.thread_time()  # the writer thread's own CPU time
        try:
            return original(*args, **kwargs)
        finally:
            writes.append(time.thread_time() - started)

    store.write_step = timed_write_step  # type: ignore[assignment]
    try:
        torch.manual_seed(0)
        model = build_model(ResNetConfig(depth=20, activation="elu"))
        criterion = torch.nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
        every = SaveConfig(save_interval=1)
        hook = Hook(out_dir, collections={"losses": every, "gradients": every, "weights": every})
        hook.register_module(model)
        hook.register_loss(criterion)
        hook.register_optimizer(optimizer)
        started = 0.0
        for step in range(WARMUP + steps):
            if step == WARMUP:
                started = time.perf_counter()
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        hook.close()
        step_s = (time.perf_counter() - started) / steps
    finally:
        store.write_step = original  # type: ignore[assignment]
        store.WRITE_CHECKSUMS = True
    read_started = time.process_time()
    trial = create_trial(out_dir)
    tensors = 0
    for name in trial.tensor_names():
        view = trial.tensor(name)
        for step in view.steps():
            view.value(step)
            tensors += 1
    read_s = time.process_time() - read_started
    return {"writer": statistics.median(writes), "step": step_s, "read": read_s, "n": tensors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for checksums in (False, True):  # interleaved: load drifts hit both alike
                out = Path(scratch) / f"{checksums}-{repeat}"
                results[checksums].append(run(args.steps, out, checksums))
    size = sum(p.numel() * 4 for p in build_model(ResNetConfig(depth=20)).parameters())
    print(f"ResNet-20: {2 * size / 1e6:.1f} MB of weights + gradients per step file")
    print(f"{'':8s} {'no checksum':>14s} {'checksums':>14s} {'ratio':>7s}")
    for key, unit, scale in (("writer", "ms", 1e3), ("step", "ms", 1e3), ("read", "ms", 1e3)):
        off = statistics.median(r[key] for r in results[False])
        on = statistics.median(r[key] for r in results[True])
        print(f"{key:8s} {off * scale:11.2f} {unit} {on * scale:11.2f} {unit} {on / off:7.3f}")
    tensors = int(results[True][0]["n"])
    print(f"(median of {args.repeats} interleaved repeats, {args.steps} steps each; "
          f"read = {tensors} tensors with a fresh trial)")  # fmt: skip


if __name__ == "__main__":
    main()

"""What reading an update's loss and gradient norm costs the zero-code capture, per update.

    .venv/bin/python benchmarks/update_read.py [--repeats 9]

The launcher's capture reads each update's loss and the L2 norm of its gradients (the NaN
guard's input, the progress records' grad_norm). Two ways, on CPU tensors, 1 torch thread:
  torch float64   each gradient's float64 norm (torch._foreach_norm), stacked with the loss
                  and read in one .tolist() (_read_stacked: what a device still does)
  in place        numpy's dot over each gradient's own memory, the loss by .item()
                  (debugger/zero_code.py: _read_in_place, what the CPU does)
on the gradients of two models: the MLP of benchmarks/zero_code_overhead.py (6 tensors)
and the built-in ELU ResNet-20 at width 16 with batch norm (62 tensors).
The two take turns, `--repeats` blocks each, in one process; prints the median
microseconds per update and their ratio, and the largest relative difference between the
two norms. The end-to-end figure (the launched script against the plain loop) is
benchmarks/zero_code_overhead.py's; on a loaded machine its noise (+-0.2 ms per MLP step)
is larger than this difference. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from remedy.debugger.zero_code import _read_in_place, _read_stacked  # noqa: E402
from remedy.state_schema import Hyperparameters  # noqa: E402
from remedy.training.build import build_model_and_optimizer  # noqa: E402

Gradients = tuple[torch.Tensor, list[torch.Tensor]]


def gradients(model_name: str) -> Gradients:
    """One backward of the model on random data: (loss, its gradients)."""
    torch.manual_seed(0)
    if model_name == "mlp":
        model: torch.nn.Module = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
            torch.nn.ReLU(), torch.nn.Linear(64, 10),
        )  # fmt: skip
        x = torch.randn(64, 32)
    else:
        config = Hyperparameters(depth=20, width=16, activation="elu", add_batch_norm=1)
        model, _ = build_model_and_optimizer(config)
        x = torch.randn(32, 3, 32, 32)
    loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (x.shape[0],)))
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters() if p.grad is not None]


def torch_float64(loss: torch.Tensor, grads: list[torch.Tensor]) -> tuple[float, float]:
    read = _read_stacked(loss, grads)
    assert read is not None, "the loss and its gradients are on one device"
    return read


def in_place(loss: torch.Tensor, grads: list[torch.Tensor]) -> tuple[float, float]:
    read = _read_in_place(loss, grads)
    assert read is not None, "CPU float32 gradients are read in place"
    return read


def timed(read: Callable[..., tuple[float, float]], data: Gradients, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        read(*data)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="blocks per way and model")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.repeats} interleaved blocks per way")
    header = ("gradients of", "torch float64 us", "in place us", "ratio", "norm diff")
    print(f"{header[0]:<22}" + "".join(f"{h:>18}" for h in header[1:]))
    for model_name, calls in (("mlp", 3000), ("resnet20", 300)):
        data = gradients(model_name)
        ways = {"torch": torch_float64, "in place": in_place}
        figures: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.repeats):
            for name, read in ways.items():
                figures[name].append(timed(read, data, calls))
        old, new = (statistics.median(figures[name]) for name in ways)
        exact, fast = torch_float64(*data)[1], in_place(*data)[1]
        label = f"{model_name} ({len(data[1])} tensors)"
        row = (f"{old:.1f}", f"{new:.1f}", f"{new / old:.2f}x", f"{abs(fast - exact) / exact:.1e}")
        print(f"{label:<22}" + "".join(f"{cell:>18}" for cell in row))


if __name__ == "__main__":
    main()

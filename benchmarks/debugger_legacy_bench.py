"""The legacy half of debugger_overhead.py: runs INSIDE an environment with smdebug.

    /tmp/legacy-venv/bin/python benchmarks/debugger_legacy_bench.py --steps 40 --repeats 3

The legacy library (smdebug 1.0.34) needs numpy<2, so it lives in its own virtual
environment (with the same torch), which `debugger_overhead.py --legacy-env DIR` builds
from PyPI (benchmarks/legacy_env.py). remedy is not installed there: the model comes
from models/resnet.py loaded by its path (it imports torch alone). Same model, batch and
loop as debugger_overhead.py; prints one JSON line: step times and trial read throughput.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import smdebug
import smdebug.pytorch as smd
import torch
from smdebug.trials import create_trial

ROOT = Path(__file__).resolve().parents[1]


def _load_resnet() -> Any:
    """models/resnet.py by its path: `remedy.models` is a name only an install maps."""
    spec = importlib.util.spec_from_file_location("resnet", ROOT / "models" / "resnet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["resnet"] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


_resnet = _load_resnet()
ResNetConfig, build_model = _resnet.ResNetConfig, _resnet.build_model

BATCH = 32
WARMUP = 3


def make_job() -> tuple[Any, Any, Any, Any, Any]:
    torch.manual_seed(0)
    model = build_model(ResNetConfig(depth=20, activation="elu"))
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(BATCH, 3, 32, 32)
    y = torch.randint(0, 10, (BATCH,))
    return model, criterion, optimizer, x, y


def time_steps(steps: int, interval: int | None, out_dir: Path | None) -> tuple[float, float]:
    model, criterion, optimizer, x, y = make_job()
    hook = None
    if interval is not None:
        hook = smd.Hook(
            out_dir=str(out_dir),
            save_config=smd.SaveConfig(save_interval=interval),
            include_collections=["weights", "gradients", "losses"],
        )
        hook.register_module(model)
        hook.register_loss(criterion)
    started = cpu_started = 0.0
    for step in range(WARMUP + steps):
        if step == WARMUP:
            started, cpu_started = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    if hook is not None:
        hook.close()
    wall = (time.perf_counter() - started) / steps
    return wall, (time.process_time() - cpu_started) / steps  # CPU: all threads, writer too


def read_throughput(store: Path, passes: int = 3) -> tuple[int, float]:
    """(tensors, tensors per CPU second): every tensor of every step, one at a time, with a
    fresh trial (index reading included); best of `passes` (CPU time: steadier than wall
    time on a shared machine)."""
    best = 0.0
    count = 0
    for _ in range(passes):
        started = time.process_time()
        trial = create_trial(str(store))
        count = 0
        for name in trial.tensor_names():
            view = trial.tensor(name)
            for step in view.steps():
                view.value(step)
                count += 1
        best = max(best, count / max(time.process_time() - started, 1e-9))
    return count, best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--turn", type=int, default=0, help="which configuration runs first")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("smdebug").setLevel(logging.ERROR)
    scratch = Path(args.scratch)
    runs: dict[str, list[tuple[float, float]]] = {"none": [], "every_step": [], "every_100": []}
    for r in range(args.repeats):
        configs = {
            "none": (None, None),
            "every_step": (1, scratch / f"every-{r}"),
            "every_100": (100, scratch / f"100-{r}"),
        }
        names = list(configs)
        turn = (args.turn + r) % 3  # the order turns, as ours does (debugger_overhead.py)
        for name in names[turn:] + names[:turn]:
            runs[name].append(time_steps(args.steps, *configs[name]))
    count, rate = read_throughput(scratch / f"every-{args.repeats - 1}")
    figures = {
        "version": smdebug.__version__,
        "step_s": {k: statistics.median(w for w, _ in v) for k, v in runs.items()},
        "cpu_s": {k: statistics.median(c for _, c in v) for k, v in runs.items()},
        "read": [count, rate],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

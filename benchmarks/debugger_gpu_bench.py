"""The --device cuda half of debugger_overhead.py (see its docstring): capture on a GPU.

Per model (benchmarks/gpu_models.py), interleaved repeats, medians:
  none     the plain loop (zero_grad, forward, loss, backward, AdamW step);
  default  Hook: losses every step + every gradient's l2 norm every step (reductions on
           the device, one transfer per step to pinned memory, no synchronisation);
  full10   Hook: full weights + gradients every 10 steps (and the loss every step).
Each timed span ends with torch.cuda.synchronize() (and the hook's close(), which waits for
the writer), so queued work is counted. Peak memory added: max_memory_allocated over the
span minus the plain loop's. Copy floor: bytes saved per full step / the device-to-pinned
host bandwidth measured here, per step averaged over the 10.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu_models import MODELS
from remedy.debugger import Hook, ReductionConfig, SaveConfig
from remedy.debugger.collections import CollectionSpec

WARMUP = 5
FULL_INTERVAL = 10


def copy_bandwidth(nbytes: int = 256 * 2**20) -> float:
    """Bytes per second of one device-to-pinned-host copy (median of 5)."""
    source = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        started = time.perf_counter()
        host.copy_(source, non_blocking=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return nbytes / statistics.median(times)


def _hook(variant: str, out: Path) -> Hook | None:
    every = SaveConfig(save_interval=1)
    if variant == "default":
        return Hook(
            out,
            collections={"losses": every, "gradients": every},
            collection_specs={
                "gradients": CollectionSpec(reduction_config=ReductionConfig(norms=("l2",)))
            },
        )
    if variant == "full10":
        tenth = SaveConfig(save_interval=FULL_INTERVAL)
        return Hook(
            out,
            collections={"losses": every, "gradients": tenth, "weights": tenth, "biases": tenth},
        )
    return None


def time_variant(name: str, variant: str, steps: int, out: Path) -> tuple[float, int]:
    """(seconds per step, peak bytes allocated) of one run."""
    torch.manual_seed(0)
    model, loss_fn, batch = MODELS[name]("cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    hook = _hook(variant, out)
    if hook is not None:
        hook.register_module(model, count_steps=False)
        hook.register_optimizer(optimizer)
    started = 0.0
    for step in range(WARMUP + steps):
        if step == WARMUP:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            started = time.perf_counter()
        if hook is not None:
            hook.begin_step()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch())
        loss.backward()
        if hook is not None:
            hook.save_tensor("loss", loss.detach(), collection="losses")
        optimizer.step()
    torch.cuda.synchronize()
    if hook is not None:
        hook.close()
    seconds = (time.perf_counter() - started) / steps
    peak = torch.cuda.max_memory_allocated()
    del model, optimizer, hook
    torch.cuda.empty_cache()
    return seconds, peak


def saved_bytes(name: str) -> int:
    model, _, _ = MODELS[name]("cuda")
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return 2 * total  # weights and gradients


def run_cuda(quick: bool) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    steps = 20 if quick else 60
    repeats = 3 if quick else 5
    bandwidth = copy_bandwidth()
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device-to-pinned-host "
        f"copy {bandwidth / 1e9:.1f} GB/s; {steps} timed steps x {repeats} repeats, medians"
    )
    for name in MODELS:
        runs: dict[str, list[tuple[float, int]]] = {"none": [], "default": [], "full10": []}
        with tempfile.TemporaryDirectory(prefix="debugger-gpu-") as tmp:
            for r in range(repeats):
                for variant in runs:
                    out = Path(tmp) / f"{variant}-{r}"
                    runs[variant].append(time_variant(name, variant, steps, out))
        median: dict[str, Any] = {
            v: (statistics.median(t for t, _ in rs), max(p for _, p in rs))
            for v, rs in runs.items()
        }
        base, base_peak = median["none"]
        floor = saved_bytes(name) / bandwidth / FULL_INTERVAL
        print(f"{name}: no hook {base * 1000:.1f} ms/step")
        labels = {
            "default": "losses + gradient norms, every step",
            "full10": f"weights + gradients every {FULL_INTERVAL}",
        }
        for variant, label in labels.items():
            seconds, peak = median[variant]
            added = seconds - base
            line = (
                f"  {label:40s} {seconds * 1000:8.1f} ms ({added / base * 100:+.2f} %), "
                f"peak memory +{(peak - base_peak) / 2**20:.0f} MiB"
            )
            if variant == "full10":
                line += f", copy floor {floor * 1000:.2f} ms/step: {added / floor:.2f}x the floor"
            print(line)

"""Cost of the tensor debugger's hook, and read speed of its trial; legacy hook for comparison.

    .venv/bin/python benchmarks/debugger_overhead.py [--steps 40] [--repeats 3]
        [--legacy-python /tmp/legacy-venv/bin/python]

One model for everything: the CPU ELU ResNet-20 (models/resnet.py, width 16), batch 32 of
random CIFAR-shaped data, SGD. Measured per configuration, interleaved `--repeats` times
(the median is printed, so a neighbour's burst on a shared machine skews one run, not the
figure): step time without a hook; with our hook saving weights + gradients + losses every
step, and every 100 steps. Then trial read throughput: every tensor of every step of the
every-step store, read one tensor at a time (tensors/s).
With --legacy-python (an environment with the legacy smdebug library, which needs numpy<2),
benchmarks/debugger_legacy_bench.py runs the same measurements with the legacy hook and
trial in that interpreter. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from remedy.debugger import Hook, SaveConfig, create_trial  # noqa: E402
from remedy.models.resnet import ResNetConfig, build_model  # noqa: E402

BATCH = 32
WARMUP = 3


def make_job(seed: int = 0) -> tuple[Any, Any, Any, Any, Any]:
    torch.manual_seed(seed)
    model = build_model(ResNetConfig(depth=20, activation="elu"))
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(BATCH, 3, 32, 32)
    y = torch.randint(0, 10, (BATCH,))
    return model, criterion, optimizer, x, y


def time_steps(steps: int, interval: int | None, out_dir: Path | None) -> tuple[float, float]:
    """Seconds per step (after warm-up) of the plain loop, with our hook if `interval`."""
    model, criterion, optimizer, x, y = make_job()
    hook = None
    if interval is not None and out_dir is not None:
        every = SaveConfig(save_interval=interval)
        hook = Hook(out_dir, collections={"losses": every, "gradients": every, "weights": every})
        hook.register_module(model)
        hook.register_loss(criterion)
        hook.register_optimizer(optimizer)
    started = cpu_started = 0.0
    for step in range(WARMUP + steps):
        if step == WARMUP:
            started, cpu_started = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    if hook is not None:
        hook.close()  # the writer's backlog counts: close() waits for the last step on disk
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


def ours_once(steps: int, scratch: Path, r: int) -> dict[str, tuple[float, float]]:
    return {
        "none": time_steps(steps, None, None),
        "every_step": time_steps(steps, 1, scratch / f"ours-every-{r}"),
        "every_100": time_steps(steps, 100, scratch / f"ours-100-{r}"),
    }


def summarise(runs: list[dict[str, Any]], read: tuple[int, float]) -> dict[str, Any]:
    keys = ("none", "every_step", "every_100")
    return {
        "step_s": {k: statistics.median(run["step_s"][k] for run in runs) for k in keys},
        "cpu_s": {k: statistics.median(run["cpu_s"][k] for run in runs) for k in keys},
        "read": read,
    }


def legacy(python: str, steps: int, scratch: Path, r: int) -> dict[str, Any] | None:
    """One repeat of the legacy measurements, in the legacy interpreter."""
    script = ROOT / "benchmarks" / "debugger_legacy_bench.py"
    cmd = [python, str(script), "--steps", str(steps), "--repeats", "1"]
    cmd += ["--scratch", str(scratch / f"legacy-{r}")]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        print(f"legacy benchmark failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(name: str, figures: dict[str, Any]) -> None:
    step, cpu = figures["step_s"], figures["cpu_s"]
    print(f"{name}:                       wall ms/step          CPU ms/step")
    rows = (("none", "no hook"), ("every_step", "w+g+loss every step"))
    for key, label in (*rows, ("every_100", "w+g+loss every 100 steps")):
        wall = f"{step[key] * 1000:8.1f} ({(step[key] / step['none'] - 1) * 100:+6.1f} %)"
        used = f"{cpu[key] * 1000:8.1f} ({(cpu[key] / cpu['none'] - 1) * 100:+6.1f} %)"
        print(f"  {label:28s} {wall}   {used}")
    count, rate = figures["read"]
    print(f"  trial read                   {rate:8.0f} tensors per CPU second ({count} tensors)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--legacy-python", help="interpreter of an environment with smdebug")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"ELU ResNet-20, batch {BATCH}, CPU, torch {torch.__version__}, "
        f"{args.threads} intra-op thread(s), {args.steps} timed steps x {args.repeats} repeats"
    )
    with tempfile.TemporaryDirectory(prefix="debugger-bench-") as tmp:
        scratch = Path(tmp)
        # Ours and the legacy library take turns, so both see the same machine load.
        mine_runs, their_runs = [], []
        for r in range(args.repeats):
            once = ours_once(args.steps, scratch, r)
            mine_runs.append(
                {
                    "step_s": {k: w for k, (w, _) in once.items()},
                    "cpu_s": {k: c for k, (_, c) in once.items()},
                }  # fmt: skip
            )
            if args.legacy_python:
                theirs = legacy(args.legacy_python, args.steps, scratch, r)
                if theirs is not None:
                    their_runs.append(theirs)
        mine = summarise(mine_runs, read_throughput(scratch / f"ours-every-{args.repeats - 1}"))
        report("remedy debugger", mine)
        if their_runs:
            reads = [run["read"] for run in their_runs]
            theirs = summarise(their_runs, (reads[-1][0], statistics.median(r[1] for r in reads)))
            report(f"legacy smdebug {their_runs[0].get('version', '?')}", theirs)
            print(f"read speed-up: {mine['read'][1] / theirs['read'][1]:.1f}x")


if __name__ == "__main__":
    main()

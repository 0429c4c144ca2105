"""Measure the demo scenario for real: the seed's remediation ladder, one fresh job each.

    .venv/bin/python benchmarks/explosion_sweep.py [--width 8 --batch-size 32 ...]

Each rung runs `python -m remedy.training.train` as its own process (torch import included), as
the demo does. Only this script looks at gradients: a global optimizer pre-step hook
installed in the child process records the first step whose gradients hold NaN or inf and
(unless --no-stop) creates the job's stop file at once, as an instant monitor would. The job
itself is unchanged. Prints per rung: first non-finite step/epoch, steps run, final test
accuracy, wall and CPU seconds. Defaults are the demo's (remedy.training.demo.DEMO_RUN_SPEC).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remedy.state_schema import Hyperparameters  # noqa: E402
from remedy.training.demo import DEMO_RUN_SPEC  # noqa: E402

# The attempts the seed policy makes from the demo start: halve the warmup while
# warmup / 5 >= 1e-3, then add batch norm. (warmup_learning_rate, add_batch_norm)
SEED_LADDER = [(0.1, 0), (0.05, 0), (0.025, 0), (0.0125, 0), (0.00625, 0), (0.003125, 0)]
SEED_LADDER += [(0.003125, 1)]

# Runs in the child: watch gradients just before each optimizer step, then run the job.
CHILD = """
import json, os, runpy, sys
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

report, stop_on_detect = sys.argv[1], sys.argv[2] == "1"
steps = 0

def check(optimizer, args, kwargs):
    global steps
    steps += 1
    if os.path.exists(report):
        return
    grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    nan = any(bool(g.isnan().any()) for g in grads)
    inf = any(bool(g.isinf().any()) for g in grads)
    if nan or inf:
        with open(report, "w") as f:
            json.dump({"step": steps, "nan": nan, "inf": inf}, f)
        if stop_on_detect:
            open(os.environ["REMEDY_STOP_FILE"], "w").close()

register_optimizer_step_pre_hook(check)
sys.argv = ["remedy.training.train"] + sys.argv[3:]
runpy.run_module("remedy.training.train", run_name="__main__", alter_sys=True)
"""


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_attempt(
    hyperparameters: dict[str, Any], folder: Path, stop_on_detect: bool
) -> dict[str, Any]:
    folder.mkdir(parents=True)
    (folder / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    report = folder / "nonfinite.json"
    env = dict(os.environ, REMEDY_STOP_FILE=str(folder / "stop_request"))
    env.pop("REMEDY_DEBUGGER_CONFIG", None)  # measure the job alone
    command = [
        sys.executable, "-c", CHILD, str(report), "1" if stop_on_detect else "0",
        "--hyperparameters", str(folder / "hyperparameters.json"), "--output-dir", str(folder),
    ]  # fmt: skip
    cpu_before, started, launched = children_cpu_seconds(), time.perf_counter(), time.time()
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, children_cpu_seconds() - cpu_before
    if completed.returncode != 0:
        raise RuntimeError(f"job failed ({completed.returncode}):\n{completed.stderr[-3000:]}")

    result = json.loads((folder / "result.json").read_text())
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if line["type"] == "step"]
    epochs = [line for line in lines if line["type"] == "epoch"]
    first_train_step = steps[0]["wall_time"] if steps else None
    nonfinite = json.loads(report.read_text()) if report.exists() else None
    steps_per_epoch = json.loads((folder / "progress.json").read_text())["steps_per_epoch"]
    return {
        "result": result,
        "nonfinite": nonfinite,
        "nonfinite_epoch": (nonfinite["step"] - 1) // steps_per_epoch if nonfinite else None,
        "first_null_loss_step": next((s["step"] for s in steps if s["loss"] is None), None),
        "test_accuracy_by_epoch": [e["test_accuracy"] for e in epochs],
        "wall_s": wall,
        "cpu_s": cpu,
        # startup = process start to the end of step 1 (imports, data, model)
        "startup_s": first_train_step - launched if first_train_step else None,
        "s_per_step": (  # evaluation between epochs included
            (steps[-1]["wall_time"] - steps[0]["wall_time"]) / (len(steps) - 1)
            if len(steps) > 1
            else None
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key in ["width", "batch_size", "train_samples", "test_samples", "num_epochs", "seed"]:
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None)
    parser.add_argument("--no-stop", action="store_true", help="let exploded runs go on")
    parser.add_argument("--threads", type=int, default=None, help="REMEDY_TORCH_THREADS")
    parser.add_argument("--rungs", type=int, default=None, help="only the first N rungs")
    args = parser.parse_args()

    base = DEMO_RUN_SPEC.hyperparameters()  # what the demo's jobs receive
    for key in ["width", "batch_size", "train_samples", "test_samples", "num_epochs", "seed"]:
        if getattr(args, key) is not None:
            base[key] = getattr(args, key)
    Hyperparameters.model_validate(base)  # a bad option fails here, not in the first job
    print("base:", json.dumps(base))
    if args.threads is not None:
        os.environ["REMEDY_TORCH_THREADS"] = str(args.threads)
    threads = os.environ.get("REMEDY_TORCH_THREADS", "torch default")
    print(f"cpu cores: {os.cpu_count()}, torch threads: {threads}\n")

    ladder = SEED_LADDER[: args.rungs] if args.rungs else SEED_LADDER
    total_wall = total_cpu = 0.0
    with tempfile.TemporaryDirectory(prefix="explosion-sweep-") as tmp:
        for i, (warmup, batch_norm) in enumerate(ladder):
            spec = base | {"warmup_learning_rate": warmup, "add_batch_norm": batch_norm}
            run = run_attempt(spec, Path(tmp) / f"attempt-{i}", stop_on_detect=not args.no_stop)
            total_wall += run["wall_s"]
            total_cpu += run["cpu_s"]
            nonfinite = run["nonfinite"]
            where = (
                f"non-finite gradients at step {nonfinite['step']} (epoch "
                f"{run['nonfinite_epoch']}, nan={nonfinite['nan']}, inf={nonfinite['inf']})"
                if nonfinite
                else "gradients finite throughout"
            )
            accuracy = ", ".join(f"{a:.3f}" for a in run["test_accuracy_by_epoch"]) or "-"
            sps = f"{run['s_per_step']:.3f}" if run["s_per_step"] else "-"
            print(
                f"rung {i}: warmup {warmup:<8g} bn {batch_norm}: {where}; "
                f"first null loss at step {run['first_null_loss_step']}\n"
                f"    {run['result']['status']} after {run['result']['steps']} steps, "
                f"test accuracy by epoch [{accuracy}], "
                f"wall {run['wall_s']:.1f} s (startup {run['startup_s']:.1f} s), "
                f"cpu {run['cpu_s']:.1f} s, {sps} s/step",
                flush=True,
            )
    print(f"\ntotal: wall {total_wall:.1f} s, cpu {total_cpu:.1f} s over {len(ladder)} attempts")


if __name__ == "__main__":
    main()

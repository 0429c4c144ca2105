"""What the launcher's zero-code capture costs per training step: plain loop vs launched.

    .venv/bin/python benchmarks/zero_code_overhead.py [--repeats 5 --steps 40 --threads 1]
    .venv/bin/python benchmarks/zero_code_overhead.py --device cuda [--quick]

Two models on CPU, SGD momentum, one fixed batch of random data:
  - a small MLP (32 -> 64 -> 64 -> 10, batch 64), whose step is so short that the capture's
    fixed per-step cost shows; it runs 10x --steps steps (and 10x the warm-up);
  - the built-in ELU ResNet-20 at the demo's width 8 and batch 64, with batch norm
    (remedy.training.build.build_model_and_optimizer), --steps steps.
The training step is a plain loop: zero_grad, forward, loss, backward(), optimizer.step(),
no .item(). It is timed in-process, in four variants:
  plain     the loop called directly, nothing installed;
  guard     the loop in this very file run as the user's script by the launcher's own
            remedy.training.launch.launch() (runpy, ZeroCodeCapture installed with the
            launcher's ScriptMonitor, NaN guard "stop", stop file watched), no output dir,
            no store;
  progress  + REMEDY_OUTPUT_DIR: metrics.jsonl every step, progress.json at most every 50 ms;
  store     + REMEDY_DEBUGGER_CONFIG: the local backend's config for the demo run_spec
            (losses every step, gradients every 5 steps), a fresh store each run.
--device cuda (refused with status 2 where torch sees no CUDA device): the same four
variants with the GPU models of benchmarks/gpu_models.py (a GPT-2-small-sized transformer,
batch 8 x 1024 tokens; a ResNet-50-sized CNN, batch 64), AdamW, each timed span begun and
ended with torch.cuda.synchronize(); beside each variant the peak device memory it adds
(max_memory_allocated over the timed steps, minus the plain loop's). There the launcher's
NaN guard reads each update's loss and gradient norms one update late (no stall; see
debugger/zero_code.py, "One-step lag"). The zero-code default capture is "capture + NaN
guard" (losses and per-tensor gradient norms every step); its goal is <= 2 % of the step.
The environment is read by JobEnvironment.from_environ and the config by
HookConfig.from_dict, as the launcher's main() reads them. Each figure is the loop's wall
time per step (warm-up excluded; periodic costs such as every 5th step's gradients are
averaged in), the median over --repeats runs; the variants take turns within each repeat,
in a rotating order, so load from other processes hits them alike. The end of a launched
run (closing the store, which waits for its writer thread; result.json) is not in the
per-step figure: it is printed separately as "end" (median ms per run). Prints figures;
asserts nothing.

Its figures, with the dates and loads they were taken at, are in README.md ("Figures").
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from benchmarks.gpu_models import MODELS as GPU_MODELS  # noqa: E402
from remedy.debugger import HookConfig  # noqa: E402
from remedy.jobs.local.backend import debugger_config  # noqa: E402
from remedy.state_schema import Hyperparameters  # noqa: E402
from remedy.state_schema.job_env import (  # noqa: E402
    NAN_GUARD_ENV,
    OUTPUT_DIR_ENV,
    RULE_STATUS_DIR_ENV,
    STOP_FILE_ENV,
    TORCH_THREADS_ENV,
)
from remedy.training.build import build_model_and_optimizer  # noqa: E402
from remedy.training.demo import DEMO_RUN_SPEC  # noqa: E402
from remedy.training.environment import JobEnvironment  # noqa: E402
from remedy.training.launch import Target, launch  # noqa: E402

CPU_MODELS = ("mlp", "resnet20")
CUDA_MODELS = tuple(GPU_MODELS)  # a GPT-2-small-sized transformer, a ResNet-50-sized CNN
MODEL_NAMES = {
    "mlp": "MLP 32-64-64-10, batch 64",
    "resnet20": "ELU ResNet-20 w8 BN, batch 64",
    "gpt2-small": "GPT-2-small-sized decoder, batch 8 x 1024 tokens, AdamW",
    "resnet50": "ResNet-50-sized CNN, batch 64 x 224x224, AdamW",
}
VARIANTS = ("plain", "guard", "progress", "store")
LABELS = {
    "guard": "capture + NaN guard",
    "progress": "+ progress files",
    "store": "+ tensor store (demo config)",
}
MLP_FACTOR = 10  # the MLP's steps and warm-up, per --steps / warm-up step of the ResNet
WARMUP = 5
CHILD_FLAG = "--as-script"  # this file run by the launcher as the user's script


def make_step(model_name: str, device: str) -> Callable[[], None]:
    """One training step of the model: zero_grad, forward, loss, backward(), step()."""
    if model_name in GPU_MODELS:  # AdamW, as benchmarks/debugger_gpu_bench.py
        torch.manual_seed(0)
        model, loss_fn, batch = GPU_MODELS[model_name](device)
        model.train()
        adamw = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def gpu_step() -> None:
            adamw.zero_grad(set_to_none=True)
            loss_fn(model, batch()).backward()
            adamw.step()

        return gpu_step
    model, optimizer, x, y = make_job(model_name)
    criterion = nn.CrossEntropyLoss()
    model.train()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def make_job(model_name: str) -> tuple[nn.Module, torch.optim.Optimizer, Tensor, Tensor]:
    torch.manual_seed(0)
    if model_name == "mlp":
        model: nn.Module = nn.Sequential(
            nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
        )
        optimizer: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=0.01, momentum=0.9
        )
        x = torch.randn(64, 32)
    else:
        config = Hyperparameters(
            depth=20, width=8, activation="elu", add_batch_norm=1, batch_size=64,
            warmup_learning_rate=0.01, learning_rate=0.01,
        )  # fmt: skip
        model, optimizer = build_model_and_optimizer(config)
        x = torch.randn(64, 3, 32, 32)
    return model, optimizer, x, torch.randint(0, 10, (64,))


def train_loop(model_name: str, steps: int, warmup: int, device: str) -> dict[str, float]:
    """The user's loop: wall seconds per timed step, CPU seconds per step of the whole
    process (its threads included), perf_counter when the loop ended, and on CUDA the
    peak device memory allocated over the timed steps (bytes). On CUDA each timed span
    starts and ends with torch.cuda.synchronize(), so queued work is counted."""
    step = make_step(model_name, device)
    cuda = device == "cuda"
    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    ended, cpu = time.perf_counter(), time.process_time() - cpu_started
    peak = float(torch.cuda.max_memory_allocated()) if cuda else 0.0
    return {"wall": (ended - started) / steps, "cpu": cpu / steps, "ended": ended, "peak": peak}


def as_script(argv: list[str]) -> None:
    """Run by the launcher (runpy, __main__): the loop, its figures into a JSON file."""
    model_name, steps, warmup, device, out = argv[0], int(argv[1]), int(argv[2]), argv[3], argv[4]
    Path(out).write_text(json.dumps(train_loop(model_name, steps, warmup, device)))


def launched(
    model_name: str,
    steps: int,
    warmup: int,
    variant: str,
    threads: int,
    scratch: Path,
    device: str,
) -> tuple[dict[str, float], float]:
    """(train_loop's figures, seconds from the loop's end to launch() returning): the loop
    run as the script by the launcher's launch(), with the variant's environment."""
    scratch.mkdir(parents=True)
    environ = {
        NAN_GUARD_ENV: "stop",
        STOP_FILE_ENV: str(scratch / "stop"),
        RULE_STATUS_DIR_ENV: str(scratch / "rule_status"),
        TORCH_THREADS_ENV: str(threads),
    }
    if variant in ("progress", "store"):
        environ[OUTPUT_DIR_ENV] = str(scratch / "output")
    config = None
    if variant == "store":
        config = HookConfig.from_dict(debugger_config(DEMO_RUN_SPEC, scratch / "tensors"))
    env = JobEnvironment.from_environ(environ)
    figures = scratch / "figures.json"
    args = [CHILD_FLAG, model_name, str(steps), str(warmup), device, str(figures)]
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):  # the launcher's own two log lines
            code = launch(Target(path=str(Path(__file__).resolve())), args, env, config)
        returned = time.perf_counter()
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    if code != 0 or not figures.exists():
        raise RuntimeError(f"launched run failed (status {code}):\n{log.getvalue()}")
    result = json.loads(figures.read_text())
    return result, returned - result["ended"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per variant and model")
    parser.add_argument(
        "--steps", type=int, default=40, help=f"timed steps per run (the MLP: x{MLP_FACTOR})"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="3 repeats of 10 steps")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--models", help=f"comma-separated; CPU: {CPU_MODELS}, CUDA: {CUDA_MODELS}")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (torch.cuda.is_available() is False)")
    if args.quick:
        args.repeats, args.steps = 3, 10
    known = CUDA_MODELS if args.device == "cuda" else CPU_MODELS
    models = [m for m in (args.models or ",".join(known)).split(",") if m]
    unknown = set(models) - set(known)
    if unknown:
        parser.error(
            f"--models: unknown {sorted(unknown)} on {args.device}; expected some of {list(known)}"
        )
    torch.set_num_threads(args.threads)
    device = f"CUDA {torch.cuda.get_device_name()}" if args.device == "cuda" else "CPU"
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"torch {torch.__version__}, {device}, {args.threads} thread(s), {args.repeats} repeats; "
        f"per run: {args.steps} steps after {WARMUP} warm-up (the MLP: x{MLP_FACTOR}); "
        "medians over repeats"
    )
    runs: dict[tuple[str, str], list[dict[str, float]]] = {
        (m, v): [] for m in models for v in VARIANTS
    }
    ends: dict[tuple[str, str], list[float]] = {
        (m, v): [] for m in models for v in VARIANTS if v != "plain"
    }
    with tempfile.TemporaryDirectory(prefix="zero-code-bench-") as tmp:
        for r in range(args.repeats):
            for model_name in models:
                factor = MLP_FACTOR if model_name == "mlp" else 1
                steps, warmup = args.steps * factor, WARMUP * factor
                order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
                for variant in order:
                    if variant == "plain":
                        figures = train_loop(model_name, steps, warmup, args.device)
                    else:
                        scratch = Path(tmp) / f"{model_name}-{variant}-{r}"
                        figures, end = launched(
                            model_name, steps, warmup, variant, args.threads, scratch, args.device
                        )
                        ends[model_name, variant].append(end)
                    runs[model_name, variant].append(figures)
            print(f"  repeat {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)

    for model_name in models:
        print(f"{MODEL_NAMES[model_name]}:")
        memory = " peak MiB added" if args.device == "cuda" else ""
        print(
            f"  {'':30s} {'wall ms/step':>11s} {'ratio':>7s} {'CPU ms/step':>13s} {'ratio':>7s}"
            f"{memory}"
        )

        def median(variant: str, key: str, name: str = model_name) -> float:
            return statistics.median(run[key] for run in runs[name, variant])

        plain_wall, plain_cpu = median("plain", "wall"), median("plain", "cpu")
        plain_peak = max(run["peak"] for run in runs[model_name, "plain"])
        for variant in VARIANTS:
            w, c = median(variant, "wall"), median(variant, "cpu")
            label = LABELS.get(variant, "plain loop")
            end = ends.get((model_name, variant))
            tail = "" if end is None else f"   end {statistics.median(end) * 1000:.1f} ms"
            added = "" if variant == "plain" else f"   +{(w - plain_wall) * 1000:.3f} ms/step"
            if args.device == "cuda":
                peak = max(run["peak"] for run in runs[model_name, variant])
                added = f" {(peak - plain_peak) / 2**20:+8.1f}" + added
            print(
                f"  {label:30s} {w * 1000:11.3f} {w / plain_wall:7.2f}"
                f" {c * 1000:13.3f} {c / plain_cpu:7.2f}{added}{tail}"
            )
        spread = ", ".join(
            f"{v} {min(t) * 1000:.3f}-{max(t) * 1000:.3f}"
            for v in VARIANTS
            for t in [[run["wall"] for run in runs[model_name, v]]]
        )
        print(f"  wall ms/step over repeats: {spread}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == CHILD_FLAG:
        as_script(sys.argv[2:])
    else:
        main()

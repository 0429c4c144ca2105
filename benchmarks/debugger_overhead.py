"""Cost of the tensor debugger's hook, and read speed of its trial; legacy hook for comparison.

    .venv/bin/python benchmarks/debugger_overhead.py [--steps 40] [--repeats 3] [--quick]
        [--blocks 30] [--legacy-env /tmp/legacy-venv | --legacy-python /tmp/legacy-venv/bin/python]
    .venv/bin/python benchmarks/debugger_overhead.py --device cuda [--quick]

One model for everything: the CPU ELU ResNet-20 (models/resnet.py, width 16), batch 32 of
random CIFAR-shaped data, SGD. Measured per configuration, interleaved `--repeats` times
(the median is printed, so a neighbour's burst on a shared machine skews one run, not the
figure): step time without a hook; with our hook saving weights + gradients + losses every
step, and every 100 steps. Then trial read throughput: every tensor of every step of the
every-step store, read one tensor at a time (tensors/s).
Beside the medians of whole runs: each repeat's runs against its own plain run (paired),
and the every-step cost inside one job (alternating_blocks: one model whose blocks of 5
steps save every step or nothing, in turns, `--blocks` of each), which a whole run's
10-20 % from one model to the next does not reach.
Reads are printed twice: the first pass (a fresh trial over files never read: every
checksum verified) and the best of three passes, each with a fresh trial; beside them the
read floor of this machine (read_floor: mapping the same files, one crc32 pass and one
copy of their tensor bytes, no reader code), which no trial that verifies and copies every
byte can pass, and its ratio to the legacy library's rate. Last, what
writing a new file of a step file's size costs this machine's kernel, on pages it may not
have touched for a while and on pages freed just before (page_fill_ms).
With --legacy-env DIR (built from PyPI when absent: benchmarks/legacy_env.py) or
--legacy-python (an environment with the legacy smdebug library, which needs numpy<2),
benchmarks/debugger_legacy_bench.py runs the same measurements with the legacy hook and
trial in that interpreter, its repeats taking turns with ours. --quick: 15 steps x 3
repeats (a few minutes with the legacy side). The load average is printed before and
after: the figures are only comparable within one run.

--device cuda (a GPU present): a GPT-2-small-sized transformer and a ResNet-50-sized CNN
(benchmarks/gpu_models.py), each step timed with the device synchronised at the end of
the timed span only. Variants: no hook; losses + per-tensor gradient l2 norms every step
(the zero-code default: losses and gradient reductions); full weights + gradients every
10 steps. Printed beside each: the peak device memory added, and for the full capture the
copy floor: the bytes saved per step over the device-to-pinned-host bandwidth measured on
the card in the same run. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
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

from remedy.debugger import Hook, SaveConfig, create_trial, store  # noqa: E402
from remedy.debugger.readers.local import _tensor_bytes  # noqa: E402
from remedy.debugger.writer import StoreWriter  # noqa: E402
from remedy.models.resnet import ResNetConfig, build_model  # noqa: E402

BATCH = 32
WARMUP = 3
BLOCK = 5  # steps in each block of alternating_blocks


def make_job(seed: int = 0) -> tuple[Any, Any, Any, Any, Any]:
    torch.manual_seed(seed)
    model = build_model(ResNetConfig(depth=20, activation="elu"))
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(BATCH, 3, 32, 32)
    y = torch.randint(0, 10, (BATCH,))
    return model, criterion, optimizer, x, y


def train_step(model: Any, criterion: Any, optimizer: Any, x: Any, y: Any) -> None:
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()


class CaptureClock:
    """The capture's own time, free of the noise of whole steps (a step of this model moves
    by 10 % between runs on a shared machine; the capture costs about 1 %): seconds in the
    hook's callbacks on the training thread, and CPU seconds of the writer thread's step
    writes (on the other core). Wraps the methods while entered; enter it before the hook
    registers them."""

    CALLBACKS = ("_on_forward", "_on_loss", "_on_optimizer_step")

    def __init__(self) -> None:
        self.training = self.writer = 0.0
        self._saved: list[tuple[type, str, Any]] = []

    def __enter__(self) -> CaptureClock:
        for name in self.CALLBACKS:
            self._wrap(Hook, name, time.perf_counter, "training")
        self._wrap(StoreWriter, "_write_steps", time.thread_time, "writer")
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in self._saved:
            setattr(owner, name, original)

    def _wrap(self, owner: type, name: str, clock: Any, total: str) -> None:
        original = getattr(owner, name)
        self._saved.append((owner, name, original))

        def timed(*args: Any) -> Any:
            started = clock()
            try:
                return original(*args)
            finally:
                setattr(self, total, getattr(self, total) + clock() - started)

        setattr(owner, name, timed)


def time_steps(
    steps: int, interval: int | None, out_dir: Path | None
) -> tuple[float, float, tuple[float, float] | None]:
    """Seconds per step (after warm-up) of the plain loop, with our hook if `interval`:
    wall, CPU (all threads), and with the hook the capture's own (training thread, writer
    CPU) per step (CaptureClock, warm-up steps included)."""
    with CaptureClock() as clock:
        wall, cpu = _time_steps(steps, interval, out_dir)
    if interval is None:
        return wall, cpu, None
    return wall, cpu, (clock.training / (WARMUP + steps), clock.writer / (WARMUP + steps))


def _time_steps(steps: int, interval: int | None, out_dir: Path | None) -> tuple[float, float]:
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
        train_step(model, criterion, optimizer, x, y)
    if hook is not None:
        hook.close()  # the writer's backlog counts: close() waits for the last step on disk
    wall = (time.perf_counter() - started) / steps
    return wall, (time.process_time() - cpu_started) / steps  # CPU: all threads, writer too


def alternating_blocks(pairs: int, block: int, out_dir: Path) -> list[float]:
    """The every-step cost measured inside one job: one model and one hook, whose steps
    alternate in blocks of `block` that save weights + gradients + losses every step and
    blocks that save nothing, `pairs` of each. A saving block's time ends when its last
    step is on disk (the writer's backlog counts); each is set against the mean of the
    blocks that save nothing on either side of it. Whole runs of separate models move
    10-20 % from one to the next on a shared machine (another allocation, another
    moment), far more than the cost; blocks a second apart, of one model, share both.
    The plain blocks run the hook's callbacks too: the fixed cost they carry is the every
    100 steps row's own time. Returns each saving block's cost over its neighbours."""
    model, criterion, optimizer, x, y = make_job()
    first = WARMUP + block  # warm-up steps, then a plain block first
    saving = [
        step
        for pair in range(pairs)
        for step in range(first + 2 * pair * block, first + (2 * pair + 1) * block)
    ]
    listed = SaveConfig(save_interval=10**9, start_step=1, save_steps=tuple(saving))
    hook = Hook(out_dir, collections={"losses": listed, "gradients": listed, "weights": listed})
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(optimizer)
    times: list[float] = []
    for _ in range(WARMUP):
        train_step(model, criterion, optimizer, x, y)
    for _ in range(2 * pairs + 1):
        started = time.perf_counter()
        for _ in range(block):
            train_step(model, criterion, optimizer, x, y)
        hook.flush()  # a saving block's files on disk; a plain block has none to wait on
        times.append((time.perf_counter() - started) / block)
    hook.close()
    plain, saved = times[0::2], times[1::2]
    return [saved[i] / ((plain[i] + plain[i + 1]) / 2) - 1 for i in range(pairs)]


def read_throughput(store: Path, passes: int = 3) -> tuple[int, float, float]:
    """(tensors, tensors per CPU second of the first pass, best of `passes`): every tensor
    of every step, one at a time, with a fresh trial each pass (index reading included;
    CPU time: steadier than wall time on a shared machine)."""
    best = first = 0.0
    count = 0
    for done in range(passes):
        started = time.process_time()
        trial = create_trial(str(store))
        count = 0
        for name in trial.tensor_names():
            view = trial.tensor(name)
            for step in view.steps():
                view.value(step)
                count += 1
        rate = count / max(time.process_time() - started, 1e-9)
        first = rate if done == 0 else first
        best = max(best, rate)
    return count, first, best


def read_floor(folder: Path, passes: int = 3) -> tuple[int, float, int]:
    """(tensors, tensors per CPU second, bytes) of the least a trial that checks every
    checksum and hands out copies must do: map each step file's tensor bytes as the
    reader does, one crc32 pass and one copy of them, nothing else (no header, no
    Python per tensor); best of `passes`. On a machine whose memory moves a few GB/s,
    this caps what read_throughput can reach, whatever the reader's code."""
    files = sorted(folder.rglob(f"*{store.STEP_SUFFIX}"))
    layout = []  # (file, its tensor count, where its tensor bytes start)
    for path in files:
        with path.open("rb") as handle:
            raw = handle.read(store.header_size(handle.read(8)))
        entries = store.parse_header(raw, path.stat().st_size)[1]
        layout.append((path, len(entries), min(e.start for e in entries.values())))
    best, size = 0.0, 0
    for _ in range(passes):
        started = time.process_time()
        size = 0
        for path, _, start in layout:
            fd = os.open(path, os.O_RDONLY)
            try:
                data = _tensor_bytes(fd, os.fstat(fd).st_size, start)
            finally:
                os.close(fd)
            if data is None:
                raise SystemExit(f"{path}: shorter than its header says")
            store.crc32(data.data)
            data.copy()
            size += data.nbytes
            del data  # unmapped here, as a reader lets go of a file's map
        best = max(best, sum(n for _, n, _ in layout) / max(time.process_time() - started, 1e-9))
    return sum(n for _, n, _ in layout), best, size


def page_fill_ms(folder: Path, size: int, files: int = 50) -> tuple[float, float]:
    """CPU ms (this thread, the kernel's share included) to write one new file of `size`
    bytes, as the writer writes a step file: on pages the machine may not have touched for
    a while, then on pages freed a moment before (the same files written again under new
    names once the first are deleted). Most of the writer's CPU per step file is the
    kernel filling a new file's page-cache pages; a virtual machine whose host takes freed
    memory back (free page reporting) pays for each page's first touch again, and the
    first figure shows it."""
    data = os.urandom(size)
    costs = []
    for turn in ("a", "b"):
        started = time.thread_time()
        for i in range(files):
            fd = os.open(folder / f"{turn}{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        costs.append((time.thread_time() - started) / files * 1000)
        for i in range(files):
            os.unlink(folder / f"{turn}{i}")
    return costs[0], costs[1]


def ours_once(
    steps: int, scratch: Path, r: int
) -> dict[str, tuple[float, float, tuple[float, float] | None]]:
    """One repeat of the three configurations, in an order that turns with `r`: whichever
    runs after another pays for what that one left behind (about 5 % here), so a fixed
    order would charge it to the same configuration every time."""
    configs = {
        "none": (None, None),
        "every_step": (1, scratch / f"ours-every-{r}"),
        "every_100": (100, scratch / f"ours-100-{r}"),
    }
    names = list(configs)
    names = names[r % 3 :] + names[: r % 3]
    return {name: time_steps(steps, *configs[name]) for name in names}


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
    cmd = [python, str(script), "--steps", str(steps), "--repeats", "1", "--turn", str(r)]
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
    count, *rates = figures["read"]
    first = f"{rates[0]:.0f} first pass; " if len(rates) > 1 else ""  # the legacy side: best only
    print(
        f"  trial read                   {rates[-1]:8.0f} tensors per CPU second, best of 3 "
        f"({first}{count} tensors)"
    )


def report_paired(runs: list[dict[str, Any]]) -> None:
    """Each repeat's hook configurations against its own plain run (the same repeat, a
    step or two apart): the ratio a drift of the machine's speed over the whole run
    leaves alone. Medians with the lowest and highest; every 100 steps, which saves
    almost nothing, shows the noise the figure is read against."""
    for key, label in (("every_step", "every step"), ("every_100", "every 100 steps")):
        for clock in ("step_s", "cpu_s"):
            ratios = sorted(run[clock][key] / run[clock]["none"] - 1 for run in runs)
            words = "wall" if clock == "step_s" else "CPU"
            print(
                f"  paired, {label}, {words}: {statistics.median(ratios) * 100:+.1f} % median of "
                f"{len(ratios)} repeats ({ratios[0] * 100:+.1f} % to {ratios[-1] * 100:+.1f} %)"
            )


def report_own(runs: list[dict[str, Any]], plain_s: float) -> None:
    """The capture's own time per step (CaptureClock), medians over the repeats, against
    the plain step's median."""
    for key, label in (("every_step", "every step"), ("every_100", "every 100 steps")):
        training = statistics.median(run["own_s"][key][0] for run in runs)
        writer = statistics.median(run["own_s"][key][1] for run in runs)
        print(
            f"  capture's own time, {label}: training thread {training * 1000:.2f} ms "
            f"({training / plain_s * 100:.2f} % of a plain step), writer thread "
            f"{writer * 1000:.2f} ms CPU ({writer / plain_s * 100:.2f} %, on the other core)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--legacy-python", help="interpreter of an environment with smdebug")
    parser.add_argument("--legacy-env", help="the legacy library's environment (built if absent)")
    parser.add_argument("--quick", action="store_true", help="15 steps x 3 repeats")
    parser.add_argument("--blocks", type=int, default=30, help="saving blocks in one job (2+)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    if args.blocks < 2:
        parser.error(f"--blocks: at least 2 (quartiles need two), got {args.blocks}")
    if args.quick:
        args.steps, args.repeats = 15, 3
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        from benchmarks.debugger_gpu_bench import run_cuda

        run_cuda(args.quick)
        return
    if args.legacy_env:
        from benchmarks.legacy_env import legacy_python

        args.legacy_python = str(legacy_python(args.legacy_env, torch.__version__))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
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
                    "step_s": {k: w for k, (w, _, _) in once.items()},
                    "cpu_s": {k: c for k, (_, c, _) in once.items()},
                    "own_s": {k: own for k, (_, _, own) in once.items() if own},
                }  # fmt: skip
            )
            if args.legacy_python:
                theirs = legacy(args.legacy_python, args.steps, scratch, r)
                if theirs is not None:
                    their_runs.append(theirs)
        mine = summarise(mine_runs, read_throughput(scratch / f"ours-every-{args.repeats - 1}"))
        report("remedy debugger", mine)
        _, floor, floor_bytes = read_floor(scratch / f"ours-every-{args.repeats - 1}")
        print(
            f"  read floor                   {floor:8.0f} tensors per CPU second, best of 3 "
            f"(a map, one crc32 pass and one copy of the {floor_bytes / 1e6:.1f} MB read, "
            f"nothing else): the trial reads at {mine['read'][2] / floor * 100:.0f} % of it"
        )
        report_paired(mine_runs)
        costs = alternating_blocks(args.blocks, BLOCK, scratch / "alternating")
        low, median, high = statistics.quantiles(costs, n=4)
        print(
            f"  in one job, blocks of {BLOCK} steps saving every step against their plain "
            f"neighbours: {median * 100:+.1f} % median of {len(costs)} "
            f"({low * 100:+.1f} % to {high * 100:+.1f} % between the quartiles)"
        )
        report_own(mine_runs, mine["step_s"]["none"])
        every = scratch / f"ours-every-{args.repeats - 1}"
        size = max(f.stat().st_size for f in every.rglob("*") if f.is_file())
        (fill := scratch / "page-fill").mkdir()
        fresh, recycled = page_fill_ms(fill, size)
        print(
            f"  a new file of {size / 1e6:.1f} MB (a step file's size) costs {fresh:.2f} ms of "
            f"CPU to write on this machine, {recycled:.2f} ms on pages freed just before"
        )
        if their_runs:
            reads = [run["read"] for run in their_runs]
            theirs = summarise(their_runs, (reads[-1][0], statistics.median(r[1] for r in reads)))
            report(f"legacy smdebug {their_runs[0].get('version', '?')}", theirs)
            print(
                f"read speed-up: {mine['read'][2] / theirs['read'][1]:.1f}x best of 3, "
                f"{mine['read'][1] / theirs['read'][1]:.1f}x first pass "
                f"(legacy: median of its best-of-3 per repeat); the read floor is "
                f"{floor / theirs['read'][1]:.1f}x the legacy library's rate"
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""How the levelled-off question (SettledEarly) reads a noise floor over many seeds.

    .venv/bin/python benchmarks/levelled_seeds.py [--fault-seeds 36] [--healthy-seeds 8]

A rate's noise floor is chaotic: each seed, and each machine's floating-point rounding,
draws another trace, so a bar fitted to one trace says little. This runs the fault, the
char transformer example at 100x its rate (AdamW at 0.1, clipping at 1, its first 100 of
400 updates: a quarter, where the question is asked), and the nearest healthy run, the
VAE example at its own rate over 32 epochs (its first 344 of 1,376 updates), over seeds,
and prints for each launch the two figures the question reads from its loss_thirds
(records/asked_early.py: the second and last thirds' fall as a share of the first third's
drop, and as a share of the loss at the first third's end), their range, and how many
launches each pair of bars asks. Scripts run as plain processes (1 torch thread), their
step losses read from what they print (the char transformer, `--log-every 1`) or from
each backward() (the VAE, in process). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import runpy
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.repair_quality import make_data  # noqa: E402
from remedy.records.asked_early import LEVEL_FALL, LEVELLED  # noqa: E402
from remedy.state_schema.loss_windows import loss_thirds  # noqa: E402

BARS = ((0.05, 0.02), (LEVELLED, LEVEL_FALL))  # the first bars, and today's


def char_losses(corpus: Path, seed: int) -> list[float]:
    """The char transformer's first 100 losses at 0.1, one process."""
    script = ROOT / "examples" / "char_transformer" / "train.py"
    flags = ["--data", str(corpus), "--learning-rate", "0.1", "--grad-clip", "1.0"]
    flags += ["--max-steps", "100", "--log-every", "1", "--seed", str(seed)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script), *flags], capture_output=True,
                         text=True, env=env, check=True).stdout  # fmt: skip
    return [float(x) for x in re.findall(r"loss ([0-9.]+) \(", out)]


def vae_losses(digits: Path, seed: int, out_dir: str) -> list[float]:
    """The VAE's first 344 losses at its own rate (8 of its 32 epochs: its schedule reads
    only the epochs before), each loss taken as backward() is called on it."""
    import torch

    torch.set_num_threads(1)
    losses: list[float] = []
    backward = torch.Tensor.backward

    def recorded(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        losses.append(self.item())
        backward(self, *args, **kwargs)

    argv = sys.argv
    sys.argv = ["train.py", "--data", str(digits), "--lr", "0.01", "--epochs", "8",
                "--seed", str(seed), "--out_dir", out_dir]  # fmt: skip
    torch.Tensor.backward = recorded  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_path(str(ROOT / "examples" / "vae" / "train.py"), run_name="__main__")
    finally:
        torch.Tensor.backward = backward  # type: ignore[method-assign]
        sys.argv = argv
    return losses[:344]


def figures(losses: list[float]) -> tuple[float, float]:
    """(later fall / first third's drop, later fall / level at the first third's end)."""
    start, third, _, end = loss_thirds(list(losses))
    return (third - end) / (start - third), (third - end) / third


def report(name: str, rows: list[tuple[float, float]]) -> None:
    print(f"{name}: {len(rows)} seeds")
    for seed, (share, level) in enumerate(rows):
        print(f"  seed {seed:3d}: {share:7.3f} of the first drop, {level:7.3f} of its level")
    shares, levels = [r[0] for r in rows], [r[1] for r in rows]
    print(
        f"  range: {min(shares):.3f} to {max(shares):.3f}; {min(levels):.3f} to {max(levels):.3f}"
    )
    for bar, fall in BARS:
        asked = sum(1 for s, lv in rows if s <= bar and lv <= fall)
        print(f"  asked at bars {bar:g} / {fall:g}: {asked} of {len(rows)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault-seeds", type=int, default=36)
    parser.add_argument("--healthy-seeds", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="levelled-") as tmp:
        data = make_data(Path(tmp) / "data")
        with ThreadPoolExecutor(2) as pool:  # one process per core
            traces = list(pool.map(lambda s: char_losses(data / "train.txt", s),
                                   range(args.fault_seeds)))  # fmt: skip
        report("char transformer at 100x its rate, update 100 of 400", [figures(t) for t in traces])
        vae = [figures(vae_losses(data / "digits.npz", s, tmp)) for s in range(args.healthy_seeds)]
        report("VAE at its own rate, update 344 of 1,376", vae)


if __name__ == "__main__":
    main()

"""benchmarks/zero_code_overhead.py runs from a checkout: its CPU path end to end (one tiny
run of each variant), and --device cuda refused clearly where there is no GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "zero_code_overhead.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(BENCHMARK), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the CUDA run is real")
def test_device_cuda_without_a_gpu_is_refused_naming_the_option() -> None:
    done = run("--device", "cuda", "--quick")
    assert done.returncode == 2
    assert "--device cuda: no CUDA device here" in done.stderr
    assert "load average" not in done.stdout  # refused before anything ran


def test_models_of_the_other_device_are_refused() -> None:
    done = run("--models", "gpt2-small")
    assert done.returncode == 2
    assert "--models: unknown ['gpt2-small'] on cpu" in done.stderr


@pytest.mark.slow
def test_the_cpu_run_measures_every_variant_through_the_launcher() -> None:
    done = run("--models", "mlp", "--repeats", "1", "--steps", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("MLP 32-64-64-10") for line in lines)
    for label in ("plain loop", "capture + NaN guard", "+ progress files", "+ tensor store"):
        row = next(line for line in lines if line.strip().startswith(label))
        wall_ms, ratio = (float(x) for x in row[32:].split()[:2])  # after the label's 30
        assert wall_ms > 0 and ratio > 0, row
    assert sum("end " in line for line in lines) == 3  # the launched variants' end figure

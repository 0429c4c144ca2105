"""benchmarks/debugger_overhead.py runs from a checkout: its capture clock times the hook's
callbacks and the writer's step writes (methods it wraps by name, so a rename is caught
here, not by the next person to run the benchmark)."""

from __future__ import annotations

from pathlib import Path

from tests.debugger.helpers import load_benchmark


def test_the_capture_clock_times_the_hook_and_the_writer(tmp_path: Path) -> None:
    benchmark = load_benchmark("debugger_overhead")
    wall, cpu, capture = benchmark.time_steps(2, 1, tmp_path / "store")
    assert wall > 0 and cpu > 0 and capture is not None
    training, writer = capture
    assert training > 0, "no time in the hook's callbacks: CaptureClock wraps none of them"
    assert writer > 0, "no writer CPU: CaptureClock does not wrap the writer's step writes"

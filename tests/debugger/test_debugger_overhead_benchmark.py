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


def test_the_alternating_blocks_save_every_step_of_their_saving_blocks_only(
    tmp_path: Path,
) -> None:
    """The in-job measure compares blocks that save every step with blocks that save
    nothing: the store must hold exactly the saving blocks' steps, or the figure it prints
    compares something else."""
    from remedy.debugger import create_trial

    benchmark = load_benchmark("debugger_overhead")
    costs = benchmark.alternating_blocks(2, 2, tmp_path / "store")
    assert len(costs) == 2
    warmup = benchmark.WARMUP
    # warm-up, a plain block, a saving block, a plain one, a saving one, a plain one
    saving = [warmup + 2, warmup + 3, warmup + 6, warmup + 7]
    trial = create_trial(str(tmp_path / "store"))
    assert trial.steps() == saving
    weights = [name for name in trial.tensor_names() if "weight" in name]
    assert weights and trial.tensor(weights[0]).steps() == saving

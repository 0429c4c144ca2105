"""ProgressFiles: the monitor's files, strict JSON, throttled progress, the script's own kept."""

from __future__ import annotations

import json
from pathlib import Path

from remedy.training.progress import ProgressFiles


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_steps_results_and_nonfinite_numbers(tmp_path: Path) -> None:
    files = ProgressFiles(tmp_path, interval_s=0.0)
    files.step(1, float("nan"), grad_norm=float("inf"), learning_rate=None, wall_time=1.0)
    files.step(2, 0.5, grad_norm=2.0, wall_time=2.0)
    assert read(tmp_path / "progress.json") == {
        "step": 2, "loss": 0.5, "grad_norm": 2.0, "wall_time": 2.0,
        "start_step": 0, "first_loss": None,  # the first step's loss was not finite
        "first_losses": [0.5], "last_losses": [0.5],  # the finite ones, for the verdict
    }  # fmt: skip
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0] == {
        "type": "step", "step": 1, "loss": None, "grad_norm": None, "wall_time": 1.0,
    }  # fmt: skip
    assert files.result("Completed", 2, final_train_loss=0.5) is not None
    files.close()
    assert read(tmp_path / "result.json") == {
        "status": "Completed",
        "steps": 2,
        "final_train_loss": 0.5,
    }
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_progress_is_throttled_but_the_last_step_always_lands(tmp_path: Path) -> None:
    files = ProgressFiles(tmp_path, interval_s=3600)
    for step in range(1, 6):
        files.step(step, 1.0 / step)
    assert read(tmp_path / "progress.json")["step"] == 1  # later ones waited
    # the step lines land with progress.json: written once more, not once per step
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1
    files.close()
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 5  # every step
    assert read(tmp_path / "progress.json")["step"] == 5
    assert read(tmp_path / "progress.json")["first_loss"] == 1.0


def test_what_the_job_knows_lands_even_after_its_latest_step_did(tmp_path: Path) -> None:
    """A job that measured its epoch at its last update before a hold says where it holds
    (hold_at) with no step after it: the flush writes it, and dropping it too."""
    files = ProgressFiles(tmp_path, interval_s=0.0)
    files.step(43, 42.6)
    assert "hold_at" not in read(tmp_path / "progress.json")
    files.know("steps_per_epoch", 43)
    files.know("hold_at", 43)
    files.flush()
    said = read(tmp_path / "progress.json")
    assert (said["step"], said["steps_per_epoch"], said["hold_at"]) == (43, 43, 43)
    files.forget("hold_at")
    files.flush()
    assert "hold_at" not in read(tmp_path / "progress.json")
    assert read(tmp_path / "progress.json")["steps_per_epoch"] == 43


def test_progress_keeps_the_first_and_latest_losses_for_the_verdict(tmp_path: Path) -> None:
    files = ProgressFiles(tmp_path, interval_s=0.0)
    for step in range(1, 31):
        files.step(step, float(step))
    files.close()
    progress = read(tmp_path / "progress.json")
    assert progress["first_losses"] == [float(s) for s in range(1, 21)]
    assert progress["last_losses"] == [float(s) for s in range(11, 31)]


def test_files_the_script_writes_itself_are_left_to_it(tmp_path: Path) -> None:
    files = ProgressFiles(tmp_path, interval_s=0.0)
    (tmp_path / "progress.json").write_text('{"step": 7, "epoch": 0, "loss": 1.0}')
    (tmp_path / "result.json").write_text('{"status": "Completed", "steps": 7}')
    files.step(1, 0.5)
    assert files.result("Completed", 1) is None
    files.close()
    assert read(tmp_path / "progress.json")["step"] == 7
    assert read(tmp_path / "result.json")["steps"] == 7
    assert files.scripts_own == {"progress.json", "result.json"}

"""The training log is capped and rotated (jobs/local/capped_log.py), and the metrics
found in it are followed across a rotation (log_metrics.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remedy.jobs.local.capped_log import CappedLog, rotated
from remedy.jobs.local.log_metrics import LogMetrics, read_records
from remedy.state_schema import MetricDefinition

PRINT_LINES = "for n in range(5000): print(f'line {n:05d} ' + 'x' * 90)"


@pytest.mark.adversarial("fault injection", fails_as="silently wrong")
def test_a_loud_process_keeps_at_most_twice_the_cap_of_log_its_latest(tmp_path: Path) -> None:
    log = tmp_path / "training.log"
    read_end, write_end = os.pipe()
    process = subprocess.Popen([sys.executable, "-c", PRINT_LINES], stdout=write_end)
    os.close(write_end)
    capped = CappedLog(read_end, log, cap_bytes=100_000)  # the process writes 500 kB
    assert process.wait(timeout=120) == 0
    capped.join(timeout_s=120)
    assert not capped.thread.is_alive() and capped.error is None
    assert log.stat().st_size <= 100_000 and rotated(log).stat().st_size <= 100_000
    # the latest output, contiguous across the two files (a rotation may split a line)
    lines = (rotated(log).read_text() + log.read_text()).splitlines()[1:]
    numbers = [int(line[5:10]) for line in lines]
    assert numbers == list(range(numbers[0], 5000))


def test_metrics_are_followed_across_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "training.log"
    follower = LogMetrics(
        [MetricDefinition(name="ppl", regex=r"ppl ([0-9.]+)")],
        log=log,
        out=tmp_path / "log_metrics.jsonl",
        progress=tmp_path / "progress.json",
    )
    log.write_text("ppl 3.0\n")
    follower.finish()
    with log.open("a") as handle:
        handle.write("ppl 2.0\n")  # written before the rotation, not yet read
    os.replace(log, rotated(log))
    log.write_text("ppl 1.0\n")
    follower.finish()
    assert [r["value"] for r in read_records(tmp_path / "log_metrics.jsonl")] == [3.0, 2.0, 1.0]

"""An evaluator that nobody reads any more ends instead of polling for ever (real processes)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.debugger.helpers import every_step_hook, read_status, train, wait_for

RULE = {"name": "GradientsExplode", "rule": "ExplodingTensor"}


def evaluator_command(job: Path, *extra: str) -> list[str]:
    (job / "rules.json").write_text(json.dumps([RULE]))
    return [
        sys.executable, "-m", "remedy.debugger.evaluator", "--trial", str(job / "tensors"),
        "--rules", str(job / "rules.json"), "--status-dir", str(job / "rule_status"),
        "--poll-interval", "0.1", *extra,
    ]  # fmt: skip


def a_job_in_training(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    hook = every_step_hook(job / "tensors")
    train(hook, steps=3)
    hook.flush()  # written, not ended: the evaluator keeps following it
    return job


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_an_evaluator_whose_job_folder_is_deleted_exits_writing_nothing(tmp_path: Path) -> None:
    job = a_job_in_training(tmp_path)
    evaluator = subprocess.Popen(evaluator_command(job), stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: read_status(job / "rule_status", "GradientsExplode") is not None)
        # The evaluator may be writing a status while the folder goes: delete until gone.
        deadline = time.monotonic() + 10
        while job.exists() and time.monotonic() < deadline:
            shutil.rmtree(job, ignore_errors=True)
        output, _ = evaluator.communicate(timeout=30)
    finally:
        evaluator.kill()
    assert evaluator.returncode == 1
    # It names the job folder, or its status folder when it saw that one go first.
    assert "was deleted: nothing to report to; exiting" in output and str(job) in output
    assert not job.exists()  # no status write recreated any of it


PARENT = """
import subprocess, sys, time
child = subprocess.Popen(sys.argv[1:])
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_an_evaluator_stops_when_its_parent_dies(tmp_path: Path) -> None:
    job = a_job_in_training(tmp_path)
    command = evaluator_command(job, "--exit-with-parent")
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, *command], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    evaluator_pid = int(parent.stdout.readline())
    wait_for(lambda: read_status(job / "rule_status", "GradientsExplode") is not None)
    parent.send_signal(signal.SIGKILL)  # e.g. its supervisor was killed
    parent.wait()

    def evaluator_gone() -> bool:
        try:
            stat = Path(f"/proc/{evaluator_pid}/stat").read_text()
        except FileNotFoundError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] == "Z"

    wait_for(evaluator_gone, timeout=30)
    status = read_status(job / "rule_status", "GradientsExplode")
    assert status["RuleEvaluationStatus"] == "Stopped"
    assert status["steps_evaluated"] == 3

"""job.json is a typed launch record: written whole, read back the same, refused when damaged."""

from __future__ import annotations

from pathlib import Path

import pytest

from remedy.jobs.local.backend import LocalBackend
from remedy.jobs.local.launch_record import LaunchRecord, LaunchRecordError
from remedy.jobs.local.supervisor import main as supervisor_main
from remedy.state_schema import RunSpec


def test_the_launch_record_is_read_back_as_written(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    spec = RunSpec(stop_grace_s=3.0, kill_after_s=4.0, progress_timeout="fixed")
    record = backend.launch_record("j", spec, backend.paths("j"))
    record.write(tmp_path / "job.json")
    again = LaunchRecord.read(tmp_path / "job.json")
    assert again == record
    assert (again.stop_grace_s, again.kill_after_s, again.progress_timeout) == (3.0, 4.0, "fixed")
    assert again.evaluator_poll_interval == 0.5  # written, not only defaulted on reading
    assert '"evaluator_poll_interval": 0.5' in (tmp_path / "job.json").read_text()
    assert LaunchRecord.read(tmp_path / "missing.json") is None  # never launched


def test_a_damaged_launch_record_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.json").write_text('{"job_name": "j", "command": "python train.py"}')
    with pytest.raises(LaunchRecordError, match="job.json: not a launch record"):
        LaunchRecord.read(job / "job.json")
    assert supervisor_main([str(job)]) == 2  # the supervisor starts nothing
    assert "not a launched job folder" in capsys.readouterr().err
    assert supervisor_main([str(tmp_path / "nothing")]) == 2

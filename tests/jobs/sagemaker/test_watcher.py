"""The watcher's end of a job: the rule evaluator is let finish while it goes on judging."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from remedy.jobs.sagemaker import clients
from remedy.jobs.sagemaker.watcher import Watcher

# An evaluator still catching up with a store after its job ended: its status says one more
# step every 0.3 s, for 3 s (ten drains of 0.3 s), then it ends by itself.
CATCHING_UP = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    status = Path(sys.argv[1]) / "Rule.json"
    for step in range(10):
        status.write_text(json.dumps({"status": "InProgress", "details": f"Evaluated {step}"}))
        time.sleep(0.3)
    status.write_text(json.dumps({"status": "NoIssuesFound", "details": "No issues found"}))
    """
)


@pytest.fixture
def watcher(tmp_path: Path) -> Watcher:
    """A job folder's watcher that drains for 1 s and follows no bucket."""
    record = {"bucket": "b", "training_job_name": "job", "region": "us-east-1",
              "watch_poll_s": 0.1, "evaluator_drain_s": 1.0}  # fmt: skip
    (tmp_path / "sagemaker.json").write_text(json.dumps(record))
    watcher = Watcher(tmp_path)
    watcher.paths.rule_status.mkdir()
    watcher.follow_job = lambda: None  # type: ignore[method-assign]  # no bucket here
    return watcher


def test_an_evaluator_still_judging_after_the_job_is_not_cut_short(watcher: Watcher) -> None:
    watcher.evaluator = subprocess.Popen(
        [sys.executable, "-c", CATCHING_UP, str(watcher.paths.rule_status)]
    )
    started = time.monotonic()
    watcher.finish_evaluator()
    # Ended by itself (not terminated after the 1 s drain), having judged every step.
    assert watcher.evaluator.returncode == 0
    assert time.monotonic() - started >= 2.5
    status = json.loads((watcher.paths.rule_status / "Rule.json").read_text())
    assert status["status"] == "NoIssuesFound"


def test_an_evaluator_that_says_nothing_is_stopped_after_the_drain(watcher: Watcher) -> None:
    watcher.evaluator = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    watcher.finish_evaluator()
    assert watcher.evaluator.returncode != 0  # terminated
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("ValidationException", "StopTrainingJob job: not needed, already stopping or ended"),
        ("ThrottlingException", "StopTrainingJob job: ClientError ThrottlingException"),
    ],
)
def test_a_stop_the_service_refuses_is_logged_by_its_code(
    watcher: Watcher, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    code: str, said: str,
) -> None:  # fmt: skip
    """The flow's own stop reached the service first: the job is no longer InProgress, and
    the service refuses a second one (ValidationException, the service's word for it)."""
    from botocore.exceptions import ClientError

    class Refusing:
        def stop_training_job(self, **request: Any) -> None:
            error = {"Code": code, "Message": "rejected: status Stopping (bucket s3://b)"}
            raise ClientError({"Error": error}, "StopTrainingJob")

    monkeypatch.setattr(clients, "sagemaker", lambda region: Refusing())
    watcher.stop_job()
    logged = capsys.readouterr()
    assert said in logged.out + logged.err
    assert "s3://b" not in logged.out + logged.err  # the message may name the bucket

"""The backend's jobs run by the training service's stand-in (fake_service.py: requests
validated against botocore's model, each job a local process, S3 and logs on moto's real
server): what only a running job can show."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from remedy.jobs import backend_for
from remedy.jobs.sagemaker.backend import SageMakerBackend
from remedy.state_schema import job_env
from tests.flows.specs import tiny_spec
from tests.jobs.sagemaker.conftest import BUCKET, REGION, ROLE, cloud_spec
from tests.jobs.sagemaker.fake_service import FakeTrainingService

CLOUD = {"backend": "sagemaker", "sm_role": ROLE, "bucket": BUCKET, "region": REGION,
         "instance_type": "ml.m5.large"}  # fmt: skip


def settled(backend: SageMakerBackend, job: str, timeout: float = 300.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snapshot = backend.describe(job)
        pending = any(r.status in ("InProgress", "Stopping") for r in snapshot.rules)
        if snapshot.is_final and not pending and not backend.watcher_alive(job):
            return backend.describe(job)
        time.sleep(0.3)
    raise AssertionError(f"not settled: {snapshot}")


def test_the_service_refuses_a_request_its_model_refuses(service: FakeTrainingService) -> None:
    raw = boto3.client("sagemaker", region_name=REGION, config=Config(parameter_validation=False))
    with pytest.raises(ClientError, match="RoleArn") as refused:
        raw.create_training_job(TrainingJobName="no-role")
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert service.jobs == {}


@pytest.mark.slow
def test_a_warm_start_goes_on_from_its_checkpoints_step(
    service: FakeTrainingService, fast: None, tmp_path: Path
) -> None:
    """The built-in job's checkpoints go where the service syncs them; the next job starts
    from the one copied into its checkpoint prefix, and its progress and curve count on
    from the checkpoint's step, as a local warm start's do."""
    backend = backend_for("sagemaker", tmp_path / "run")
    first = tiny_spec(add_batch_norm=1, num_epochs=1, **CLOUD)
    backend.launch("cold", first)
    assert settled(backend, "cold").status.value == "Completed"
    (checkpoint,) = backend.checkpoints("cold")
    assert (checkpoint.epoch, checkpoint.step) == (1, 8)

    warm = first.model_copy(
        update={"init_checkpoint": checkpoint.path, "start_epoch": 1, "num_epochs": 2}
    )
    backend.launch("warm", warm)
    snapshot = settled(backend, "warm")
    assert snapshot.status.value == "Completed", snapshot.failure_reason
    assert snapshot.progress is not None
    assert (snapshot.progress.start_step, snapshot.progress.step) == (8, 16)
    assert snapshot.progress.steps_run == 8
    assert [r["step"] for r in backend.metrics("warm")] == list(range(9, 17))
    assert "test:accuracy" in snapshot.final_metrics  # from the job's result.json
    # The job has ended but its watcher is still draining the evaluator and has not yet
    # copied the result: the snapshot reads the result from the bucket itself.
    paths = backend.paths("warm")
    (paths.job_reports / job_env.RESULT_FILE).unlink()
    paths.watcher_pid.write_text(f"{os.getpid()}\n")  # a live process: "still watching"
    assert "test:accuracy" in backend.describe("warm").final_metrics
    name = backend.record("warm")["training_job_name"]
    log = (service.root / name / "container.log").read_text()
    assert "epoch 1, step 8, optimizer state restored" in log
    assert BUCKET not in log  # the job was given the restored copy, not the bucket's URI


GUARDED_SCRIPT = """
import pathlib, time, torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e30)  # diverges at once
for _ in range(4):
    optimizer.zero_grad()
    model(torch.ones(8, 4)).pow(2).mean().backward()
    optimizer.step()
while not pathlib.Path("release").exists():  # the test lets it end
    time.sleep(0.1)
"""


@pytest.mark.slow
def test_the_nan_guards_word_is_known_while_the_job_runs(
    service: FakeTrainingService, fast: None, tmp_path: Path
) -> None:
    """nan_guard skip: the job trains on past its non-finite updates; what the guard wrote
    reaches describe() while the job is still running, not only at its end."""
    spec = cloud_spec(tmp_path, instance_type="ml.m5.large", nan_guard="skip", rules=[],
                      hyperparameters={"lr": 0.1}, hyperparameter_roles={})  # fmt: skip
    Path(spec.source_dir or "", "train.py").write_text(GUARDED_SCRIPT)
    backend = backend_for("sagemaker", tmp_path / "run")
    backend.launch("guarded", spec)
    deadline, guard = time.monotonic() + 180, None
    while guard is None:
        assert time.monotonic() < deadline, backend.describe("guarded")
        snapshot = backend.describe("guarded")
        guard = next((r for r in snapshot.rules if r.name == "NonFiniteGradient"), None)
        time.sleep(0.3)
    assert snapshot.status.value == "InProgress"
    assert guard.status == "NoIssuesFound" and "skipped" in guard.details
    name = backend.record("guarded")["training_job_name"]
    (service.root / name / "code" / "release").write_text("")
    assert settled(backend, "guarded").status.value == "Completed"
    result = json.loads((tmp_path / "run/jobs/guarded/job/result.json").read_text())
    assert result["status"] == "Completed"

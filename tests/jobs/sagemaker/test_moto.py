"""The backend against moto's real server: CreateTrainingJob and DescribeTrainingJob (moto
completes a job at once), the tensor store, checkpoints and warm start in S3, and the job's
CloudWatch Logs stream. The watcher and the rule evaluator run as real processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3
import numpy as np
import pytest
import torch

from remedy.debugger import Hook, SaveConfig, create_trial
from remedy.jobs import backend_for
from remedy.jobs.sagemaker.backend import LOG_GROUP
from remedy.tasks.preflight import PreflightError, preflight
from tests.jobs.sagemaker.conftest import BUCKET, ROLE, cloud_spec


def write_store(uri: str, losses: list[float], nan_at: int | None = None) -> None:
    """What a job's capture writes: a loss every step and gradients (NaN at `nan_at`)."""
    every = SaveConfig(save_interval=1)
    hook = Hook(uri, collections={"losses": every, "gradients": every})
    for step, loss in enumerate(losses):
        hook.begin_step("TRAIN", step)
        hook.save_tensor("loss", np.array(loss, dtype=np.float32), collection="losses")
        grad = np.full(3, np.nan if step == nan_at else 0.1, dtype=np.float32)
        hook.save_tensor("gradient/w", grad, collection="gradients")
        hook.flush()
    hook.close()


def wait_settled(backend, job: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snapshot = backend.describe(job)
        if snapshot.is_final and all(
            r.status not in ("InProgress", "Stopping") for r in snapshot.rules
        ):
            if not backend.watcher_alive(job):
                return backend.describe(job)
        time.sleep(0.3)
    raise AssertionError(f"not settled: {snapshot}")


def test_a_completed_job_is_judged_from_its_store_in_the_bucket(
    aws: str, fast: None, tmp_path: Path
) -> None:
    backend = backend_for("sagemaker", tmp_path / "run")
    backend.launch("job-1", cloud_spec(tmp_path))
    store = backend.tensor_store("job-1")
    assert store is not None and store.startswith(f"s3://{BUCKET}/remedy/job-1-")
    write_store(store, [2.0, 1.5, 1.0, 0.5])
    snapshot = wait_settled(backend, "job-1")
    assert snapshot.status.value == "Completed"
    assert [(r.name, r.status) for r in snapshot.rules] == [("ExplodingTensor", "NoIssuesFound")]
    assert snapshot.progress is not None and snapshot.progress.step == 4
    assert (snapshot.progress.first_loss, snapshot.progress.loss) == (2.0, 0.5)
    assert [r["loss"] for r in backend.metrics("job-1")] == [2.0, 1.5, 1.0, 0.5]
    trial = backend.trial("job-1")
    assert trial is not None and trial.steps() == [0, 1, 2, 3]
    folder = tmp_path / "run/jobs/job-1"
    written = "".join(p.read_text() for p in folder.rglob("*") if p.is_file())
    assert ROLE not in written  # the role ARN is in no file of the run


def test_a_rule_that_fires_on_the_store_asks_the_service_to_stop(
    aws: str, fast: None, tmp_path: Path
) -> None:
    backend = backend_for("sagemaker", tmp_path / "run")
    backend.launch("job-2", cloud_spec(tmp_path))
    write_store(backend.tensor_store("job-2") or "", [2.0, 1.0, 0.5], nan_at=1)
    snapshot = wait_settled(backend, "job-2")
    rule = snapshot.rules[0]
    assert (rule.name, rule.status, rule.step) == ("ExplodingTensor", "IssuesFound", 1)
    log = (tmp_path / "run/jobs/job-2/watcher.log").read_text()
    # moto completes jobs at once: the stop file came after the end, or StopTrainingJob
    # was sent (moto lacks it); never the bucket in the log
    assert BUCKET not in log and ROLE not in log
    assert (tmp_path / "run/jobs/job-2/stop_request").exists()


def test_checkpoints_are_listed_and_a_warm_start_is_copied_into_the_new_job(
    aws: str, fast: None, tmp_path: Path
) -> None:
    backend = backend_for("sagemaker", tmp_path / "run")
    backend.launch("job-a", cloud_spec(tmp_path))
    s3 = boto3.client("s3")
    prefix = backend.cloud(backend.record("job-a")).checkpoints.removeprefix(f"s3://{BUCKET}/")
    for epoch in (1, 2):
        folder = f"{prefix}/epoch-{epoch:04d}"
        s3.put_object(Bucket=BUCKET, Key=f"{folder}/model.safetensors", Body=b"weights")
        meta = json.dumps({"epoch": epoch, "step": 10 * epoch})
        s3.put_object(Bucket=BUCKET, Key=f"{folder}/checkpoint.json", Body=meta.encode())
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/half-written/model.safetensors", Body=b"")
    found = backend.checkpoints("job-a")
    assert [(c.epoch, c.step) for c in found] == [(1, 10), (2, 20)]
    assert found[-1].path == f"s3://{BUCKET}/{prefix}/epoch-0002"

    backend.launch("job-b", cloud_spec(tmp_path, init_checkpoint=found[-1].path))
    target = backend.cloud(backend.record("job-b")).checkpoints.removeprefix(f"s3://{BUCKET}/")
    listing = s3.list_objects_v2(Bucket=BUCKET, Prefix=target + "/")
    assert sorted(item["Key"][len(target) + 1 :] for item in listing["Contents"]) == [
        "epoch-0002/checkpoint.json",
        "epoch-0002/model.safetensors",
    ]


def test_logs_come_from_the_jobs_cloudwatch_stream(aws: str, fast: None, tmp_path: Path) -> None:
    backend = backend_for("sagemaker", tmp_path / "run")
    backend.launch("job-l", cloud_spec(tmp_path))
    assert backend.logs("job-l") == ""  # no log group yet
    name = backend.record("job-l")["training_job_name"]
    logs = boto3.client("logs")
    try:
        logs.create_log_group(logGroupName=LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    stream = f"{name}/algo-1-1767225600"
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    lines = [f"epoch {i} loss {1 / (i + 1):.3f}" for i in range(5)]
    lines.append(f"uploading to s3://{BUCKET}/remedy/{name}/output")
    now = int(time.time() * 1000)  # the service refuses events older than 14 days
    events = [{"timestamp": now + i, "message": m} for i, m in enumerate(lines)]
    logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=events)
    tail = backend.logs("job-l", tail=3)
    assert tail.splitlines()[:2] == ["epoch 3 loss 0.250", "epoch 4 loss 0.200"]
    assert BUCKET not in tail


def test_preflight_refuses_an_incomplete_or_invalid_cloud_spec(tmp_path: Path) -> None:
    preflight(cloud_spec(tmp_path))
    cases = {
        "needs sm_role, bucket": {"sm_role": None, "bucket": None},
        "needs region, instance_type": {"region": None, "instance_type": None},
        "did you mean ml.m5.xlarge": {"instance_type": "ml.m5.xlarg"},
        "not a training instance type": {"instance_type": "m5.xlarge"},
        "no region 'us-west-9'": {"region": "us-west-9"},
        "not a bucket name": {"bucket": "Bad_Bucket"},
        "RoleArn": {"sm_role": "arn:aws:iam::12:role/x"},
        "s3:// folder": {"init_checkpoint": str(tmp_path)},
        "HyperParameters: 106 entries, at most 100": {
            "hyperparameters": {"lr": 0.1} | {f"h{i}": i for i in range(100)}
        },
    }
    for expected, fields in cases.items():
        with pytest.raises(PreflightError, match=expected) as refused:
            preflight(cloud_spec(tmp_path, **fields))
        assert ROLE not in str(refused.value) and BUCKET not in str(refused.value)


def test_the_hook_reaches_the_store_by_the_environment(aws: str, tmp_path: Path) -> None:
    """The job's side: REMEDY_DEBUGGER_CONFIG (the packed config) names the s3:// store."""
    uri = f"s3://{BUCKET}/remedy/env-job/tensors"
    config = tmp_path / "debugger.json"
    config.write_text(json.dumps({"out_dir": uri, "collections": {"losses": {"save_interval": 1}}}))
    import os

    os.environ["REMEDY_DEBUGGER_CONFIG"] = str(config)
    try:
        hook = Hook.from_env()
    finally:
        del os.environ["REMEDY_DEBUGGER_CONFIG"]
    assert hook is not None
    model = torch.nn.Linear(2, 1)
    hook.register_module(model)
    hook.register_loss(torch.nn.MSELoss())
    model(torch.ones(1, 2))
    hook.close()
    assert create_trial(uri).has_ended

"""`remedy run` of a cloud run, end to end: every call of the sagemaker backend goes to a
service that validates it against botocore's model (fake_service.py, which runs each
training job as a local process), every byte through moto's real S3 server, every log line
through moto's CloudWatch Logs. Only the compute is not the cloud's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from remedy.state_schema import JobStatus, exploding_tensor_rule, load_state
from tests.flows.specs import tiny_spec
from tests.jobs.sagemaker.conftest import BUCKET, REGION, ROLE
from tests.jobs.sagemaker.fake_service import FakeTrainingService


@pytest.mark.slow
def test_a_cloud_run_diverges_is_stopped_repaired_and_completes(
    service: FakeTrainingService, prefect_api_url: str, tmp_path: Path
) -> None:
    # test_remediate's run on the cloud backend (16 epochs: room for the stop to arrive under
    # load before the job ends): without batch norm the ELU ResNet's gradients turn
    # non-finite in epoch 1; the seed ladder adds batch norm.
    # The NaN guard is off: the rule evaluator beside the flow reads the s3:// store, and
    # the job is stopped from outside (StopTrainingJob, SIGTERM, a clean stop).
    spec = tiny_spec(
        warmup_learning_rate=0.003125, nan_guard="off", num_epochs=16, backend="sagemaker",
        sm_role=ROLE, bucket=BUCKET, region=REGION, instance_type="ml.m5.large",
        rules=[exploding_tensor_rule()],  # the seed's one rule: the stop is timed against it
    )  # fmt: skip
    (tmp_path / "spec.json").write_text(spec.model_dump_json())
    run_dir = tmp_path / "run"
    env = os.environ | {"PREFECT_API_URL": prefect_api_url}
    out = subprocess.run(
        [sys.executable, "-m", "tests.jobs.sagemaker.fast_cli", "run", str(tmp_path / "spec.json"),
         "--run-dir", str(run_dir), "--poll-interval", "0.5", "--policy", "seed"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]  # 0: the run is clean

    final = load_state(run_dir / "state.json")
    first, second = final.history.attempts
    finding = first.findings[0]
    assert finding.rule == "ExplodingTensor" and finding.tensor.startswith("gradient/")
    assert first.outcome is JobStatus.Stopped and first.steps_run < 128  # not run to the end
    job = service.jobs[training_job(run_dir, first.job_name)]
    assert job.stop_asked and (job.status, job.secondary) == ("Stopped", "Stopped")
    assert second.strategy == "add_batch_norm" and second.changes == {"add_batch_norm": [0, 1]}
    assert second.outcome is JobStatus.Completed and second.findings == []
    assert second.final_accuracy is not None and second.steps_run == 128
    assert final.history.num_batch_layer_adjustments == 1
    # The calls a real service would have had, each valid by botocore's model.
    assert service.calls.count("CreateTrainingJob") == 2 and "StopTrainingJob" in service.calls

    # The jobs' logs come from CloudWatch Logs; neither role nor bucket is shown or written
    # anywhere but in the run's payloads and each job's launch record.
    logs = subprocess.run([sys.executable, "-m", "remedy", "logs", str(run_dir)],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert logs.returncode == 0 and "Completed: " in logs.stdout, logs.stdout + logs.stderr
    shown = out.stdout + out.stderr + logs.stdout + logs.stderr
    kept = ("state.json", "start.json", "sagemaker.json")
    written = "".join(
        p.read_text(errors="replace")
        for p in run_dir.rglob("*")
        if p.is_file() and p.name not in kept
    )
    for private in (ROLE, BUCKET):
        assert private not in shown and private not in written
    name = training_job(run_dir, second.job_name)
    pages = (
        boto3.client("s3")
        .get_paginator("list_objects_v2")
        .paginate(Bucket=BUCKET, Prefix=f"remedy/{name}/")
    )
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    assert f"remedy/{name}/output/{name}/output/model.tar.gz" in keys
    assert f"remedy/{name}/checkpoints/epoch-0006/checkpoint.json" in keys


def training_job(run_dir: Path, job_name: str) -> str:
    record = json.loads((run_dir / "jobs" / job_name / "sagemaker.json").read_text())
    return record["training_job_name"]

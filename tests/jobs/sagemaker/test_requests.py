"""Every request the backend sends, validated against botocore's published model of the
service: botocore's Stubber (types, required members, lengths) on a real client, plus the
model's patterns, enums and map sizes (service_model.py). S3 is moto's real server."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from remedy.jobs import backend_for
from remedy.jobs.sagemaker import clients
from remedy.jobs.sagemaker.backend import SageMakerBackend
from remedy.jobs.sagemaker.images import ImageError, pytorch_training_image
from remedy.jobs.sagemaker.layout import CloudPaths
from remedy.jobs.sagemaker.naming import is_valid, training_job_name
from remedy.jobs.sagemaker.request import create_training_job_request
from remedy.jobs.sagemaker.service_model import RequestError, check_request, instance_types
from remedy.jobs.sagemaker.source import ENTRY_PROGRAM, SourceError, pack
from tests.jobs.sagemaker.conftest import BUCKET, REGION, ROLE, cloud_spec


@pytest.fixture
def stubbed(aws: str, monkeypatch: pytest.MonkeyPatch) -> Stubber:
    """The training service's client stubbed (requests validated against the real model);
    S3 and Logs go to the moto server. No watcher is started."""
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    stubber = Stubber(sagemaker)
    real = clients.client.__wrapped__

    def client(service: str, region: str) -> Any:
        return sagemaker if service == "sagemaker" else real(service, region)

    monkeypatch.setattr(clients, "client", client)
    monkeypatch.setattr(SageMakerBackend, "start_watcher", lambda self, job_name: None)
    stubber.activate()
    return stubber


def test_job_names_follow_the_service_rules() -> None:
    long = "complex_resnet.model " * 10 + "2021-Jan-27-06h-45m-19"
    names = {training_job_name(job, run) for job in ("a", long, "---", "x-1") for run in "12"}
    assert len(names) == 8 and all(is_valid(name) for name in names)
    assert training_job_name(long, "1") == training_job_name(long, "1")  # idempotent launch
    assert training_job_name("complex-resnet-model-2021-Jan-27-06h-45m-19", "run").startswith(
        "complex-resnet-model-2021-Jan-27-06h-45m-19-"
    )


def test_the_framework_image_follows_region_and_instance() -> None:
    assert pytorch_training_image("us-west-2", "ml.g5.xlarge") == (
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311"
    )
    assert pytorch_training_image("cn-north-1", "ml.m5.large").startswith(
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training:2.5.1-cpu-"
    )
    with pytest.raises(ImageError, match="image_uri"):
        pytorch_training_image("mars-1", "ml.m5.large")
    with pytest.raises(ImageError, match="accelerator"):
        pytorch_training_image("us-east-1", "ml.trn1.2xlarge")
    assert "ml.p4d.24xlarge" in instance_types()


def test_launch_sends_a_valid_request_and_uploads_the_packed_source(
    stubbed: Stubber, tmp_path: Path
) -> None:
    spec = cloud_spec(tmp_path, spot=True, max_run_s=3600, max_wait_s=7200)
    backend = backend_for("sagemaker", tmp_path / "run")
    name = training_job_name("job-1", str(backend.run_dir))
    cloud = CloudPaths(BUCKET, name)
    expected = create_training_job_request(spec, cloud, REGION)
    stubbed.add_response("create_training_job", {"TrainingJobArn": "arn"}, expected)
    backend.launch("job-1", spec)
    backend.launch("job-1", spec)  # launched before: nothing sent
    stubbed.assert_no_pending_responses()

    hp = expected["HyperParameters"]
    assert hp["lr"] == "0.1" and hp["optimizer"] == '"adam"' and hp["sizes"] == "[2, 3]"
    assert json.loads(hp["sagemaker_program"]) == ENTRY_PROGRAM
    assert json.loads(hp["sagemaker_submit_directory"]) == cloud.source
    assert expected["EnableManagedSpotTraining"] is True
    assert expected["StoppingCondition"] == {
        "MaxRuntimeInSeconds": 3600,
        "MaxWaitTimeInSeconds": 7200,
    }
    assert expected["CheckpointConfig"]["S3Uri"] == cloud.checkpoints
    assert "DebugHookConfig" not in expected and "DebugRuleConfigurations" not in expected
    env = expected["Environment"]
    assert env["REMEDY_ENTRY_POINT"] == "train.py"

    body = boto3.client("s3").get_object(Bucket=BUCKET, Key=cloud.source_key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        names = sorted(archive.getnames())
        config = json.load(archive.extractfile(".remedy/debugger.json"))  # type: ignore[arg-type]
    assert names == [".remedy/debugger.json", "model.py", ENTRY_PROGRAM, "train.py"]
    assert config["out_dir"] == cloud.tensors == backend.tensor_store("job-1")
    assert "gradients" in config["collections"]  # ExplodingTensor reads them
    assert pack(spec, config) == pack(spec, config)  # deterministic: a relaunch is the same
    record = json.loads((tmp_path / "run/jobs/job-1/sagemaker.json").read_text())
    assert ROLE not in json.dumps(record)


def test_the_service_limits_are_refused_before_sending(tmp_path: Path) -> None:
    cloud = CloudPaths(BUCKET, "job")
    many = {"lr": 0.1} | {f"h{i}": i for i in range(99)}
    with pytest.raises(RequestError, match=r"HyperParameters: 10\d entries, at most 100"):
        create_training_job_request(cloud_spec(tmp_path, hyperparameters=many), cloud, REGION)
    long = {"lr": 0.1, "note": "x" * 2600}
    with pytest.raises(RequestError, match=r"HyperParameters\[.note.\]: 2602 characters"):
        create_training_job_request(cloud_spec(tmp_path, hyperparameters=long), cloud, REGION)
    with pytest.raises(RequestError, match=r"Environment key 'BAD-NAME'"):
        check_request(
            "CreateTrainingJob",
            create_training_job_request(cloud_spec(tmp_path), cloud, REGION)
            | {"Environment": {"BAD-NAME": "1"}},
        )
    with pytest.raises(RequestError, match="TrainingJobName") as refused:
        check_request("DescribeTrainingJob", {"TrainingJobName": "under_score"})
    bad_role = cloud_spec(tmp_path, sm_role="arn:aws:iam::12:role/x")
    with pytest.raises(RequestError, match="RoleArn") as refused:
        create_training_job_request(bad_role, cloud, REGION)
    assert "arn:aws:iam::12" not in str(refused.value)  # the role is never quoted
    with pytest.raises(ValueError, match="sagemaker_program"):
        create_training_job_request(
            cloud_spec(tmp_path, hyperparameters={"lr": 1, "sagemaker_program": "x.py"}),
            cloud,
            REGION,
        )


def test_remedy_files_cannot_be_shadowed(tmp_path: Path) -> None:
    spec = cloud_spec(tmp_path)
    (Path(spec.source_dir or "") / ENTRY_PROGRAM).write_text("")
    with pytest.raises(SourceError, match="rename"):
        pack(spec, {})


def test_describe_stop_and_failures_map_to_the_snapshot(stubbed: Stubber, tmp_path: Path) -> None:
    accuracy = {"name": "test:accuracy", "regex": r"\(([0-9.]+)%\)", "percent": True}
    spec = cloud_spec(tmp_path, metric_definitions=[accuracy])  # the service is sent Name, Regex
    backend = backend_for("sagemaker", tmp_path / "run")
    stubbed.add_response("create_training_job", {"TrainingJobArn": "arn"}, ANY_REQUEST)
    backend.launch("job-1", spec)
    name = training_job_name("job-1", str(backend.run_dir))
    described = {"TrainingJobName": name}

    def status(word: str, secondary: str, **more: Any) -> None:
        stubbed.add_response("describe_training_job", response(name, word, secondary, **more),
                             described)  # fmt: skip

    status("InProgress", "Starting", message="Preparing the instances for training")
    snapshot = backend.describe("job-1")
    assert (snapshot.status.value, snapshot.secondary_status) == ("InProgress", "Starting")
    assert snapshot.status_message == "Preparing the instances for training"
    assert not snapshot.is_final

    # stop: describe, StopTrainingJob, then describe until it has ended
    status("InProgress", "Training")
    stubbed.add_response("stop_training_job", {}, described)
    status("Stopping", "Stopping")
    status("Stopped", "Stopped", BillableTimeInSeconds=73)
    backend.stop("job-1")
    stubbed.assert_no_pending_responses()

    cases = {
        "CapacityError: Unable to provision requested ML compute capacity.": True,
        "InternalServerError: We encountered an internal error.": True,
        "AlgorithmError: ExecuteUserScriptError: exit code 1": False,
        f"ClientError: Data download failed: s3://{BUCKET}/remedy/x: access denied": False,
    }
    from remedy.jobs import is_infrastructure_failure

    for reason, infrastructure in cases.items():
        status("Failed", "Failed", FailureReason=reason, BillableTimeInSeconds=12)
        snapshot = backend.describe("job-1")
        assert snapshot.status.value == "Failed" and snapshot.billable_s == 12
        assert is_infrastructure_failure(snapshot.failure_reason) is infrastructure
        assert BUCKET not in (snapshot.failure_reason or "")
    # Once ended and unwatched, a rule never judged is Error (never a silent pass).
    assert [(r.name, r.status) for r in snapshot.rules] == [("ExplodingTensor", "Error")]

    status(
        "Completed",
        "Completed",
        FinalMetricDataList=[{"MetricName": "test:accuracy", "Value": 91.0}],
    )
    assert backend.describe("job-1").final_metrics == {"test:accuracy": 0.91}  # a percentage


ANY_REQUEST: Any = {
    name: ANY
    for name in (
        "TrainingJobName HyperParameters AlgorithmSpecification RoleArn OutputDataConfig "
        "ResourceConfig StoppingCondition EnableManagedSpotTraining CheckpointConfig "
        "Environment Tags"
    ).split()
}


def response(name: str, status: str, secondary: str, message: str = "", **more: Any) -> dict:
    """A DescribeTrainingJob response (the Stubber checks it against the model's shape)."""
    from datetime import UTC, datetime

    found = {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{name}",
        "ModelArtifacts": {"S3ModelArtifacts": ""},
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary,
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "CreationTime": datetime(2026, 1, 1, tzinfo=UTC),
    }
    if message:
        found["SecondaryStatusTransitions"] = [
            {"Status": secondary, "StartTime": found["CreationTime"], "StatusMessage": message}
        ]
    return found | more


def test_the_command_line_form_and_path_roles_reach_the_entry_program(tmp_path: Path) -> None:
    spec = cloud_spec(
        tmp_path,
        hyperparameter_style="name=value",
        hyperparameters={"optim.lr": 0.1, "trainer.max_epochs": 2},
        hyperparameter_roles={"learning_rate": "optim.lr", "output_dir": "hydra.run.dir"},
        arguments=["--config-name=small"],
    )
    request = create_training_job_request(spec, CloudPaths(BUCKET, "job"), REGION)
    hp = request["HyperParameters"]
    assert hp["optim.lr"] == "0.1" and json.loads(hp["hydra.run.dir"]) == "/opt/ml/model"
    form = json.loads(request["Environment"]["REMEDY_COMMAND_LINE"])
    assert form == {
        "hyperparameter_style": "name=value", "arguments": ["--config-name=small"], "bare_flags": []
    }  # fmt: skip


def test_config_keys_reach_the_launcher_in_the_image_and_are_no_hyperparameters(
    tmp_path: Path,
) -> None:
    """A key of a config file (FILE:key) is no flag: the launcher in the image writes the
    attempt's copy (REMEDY_CONFIG_EDITS), an output_dir key getting the model folder."""
    spec = cloud_spec(
        tmp_path,
        hyperparameters={"cfg.yaml:optim.lr": 0.1, "seed": 3},
        hyperparameter_roles={"learning_rate": "cfg.yaml:optim.lr", "output_dir": "cfg.yaml:out"},
        arguments=["--config", "cfg.yaml"],
    )
    request = create_training_job_request(spec, CloudPaths(BUCKET, "job"), REGION)
    assert request["HyperParameters"]["seed"] == "3"
    assert not [name for name in request["HyperParameters"] if "cfg.yaml" in name]
    edits = json.loads(request["Environment"]["REMEDY_CONFIG_EDITS"])
    assert edits == {"cfg.yaml": {"optim.lr": 0.1, "out": "/opt/ml/model"}}


def test_a_probes_bound_reaches_the_cloud_job(tmp_path: Path) -> None:
    """run_spec.max_updates (a probe's) is the job's REMEDY_MAX_UPDATES, as locally; a
    full launch has none."""
    bounded = cloud_spec(tmp_path).model_copy(update={"max_updates": 50})
    request = create_training_job_request(bounded, CloudPaths(BUCKET, "job"), REGION)
    assert request["Environment"]["REMEDY_MAX_UPDATES"] == "50"
    full = create_training_job_request(cloud_spec(tmp_path), CloudPaths(BUCKET, "job"), REGION)
    assert "REMEDY_MAX_UPDATES" not in full["Environment"]

"""The environment that points boto3 at moto's real server (tests/conftest.py: S3, the
training service as far as moto has it, CloudWatch Logs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from remedy.jobs.sagemaker.backend import SageMakerBackend
from remedy.jobs.sagemaker.clients import client as CACHED_CLIENT
from remedy.state_schema import RunSpec, exploding_tensor_rule
from remedy.state_schema.sagemaker_spec import SageMakerSpec
from tests.jobs.sagemaker.fake_service import FakeTrainingService

BUCKET = "remedy-cloud-test"
REGION = "us-west-2"
ROLE = "arn:aws:iam::123456789012:role/remedy-training"


@pytest.fixture
def aws(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """boto3's usual chain, from the environment, aimed at the moto server; the bucket."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    CACHED_CLIENT.cache_clear()
    s3 = boto3.client("s3", region_name=REGION)
    try:
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    yield BUCKET
    CACHED_CLIENT.cache_clear()


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher and evaluator poll quickly; a stop is waited on briefly."""
    monkeypatch.setattr(SageMakerBackend, "watch_poll_s", 0.3)
    monkeypatch.setattr(SageMakerBackend, "evaluator_poll_s", 0.2)
    monkeypatch.setattr(SageMakerBackend, "evaluator_drain_s", 3.0)
    monkeypatch.setattr(SageMakerBackend, "stop_poll_s", 0.05)


@pytest.fixture
def service(
    aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeTrainingService]:
    """The training service's stand-in (fake_service.py), where boto3's sagemaker clients
    go (AWS_ENDPOINT_URL_SAGEMAKER); S3 and CloudWatch Logs stay moto's. Its jobs use one
    thread each (this machine's cores are shared)."""
    fake = FakeTrainingService(tmp_path / "containers", REGION, grace_s=30.0).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", fake.url)
    monkeypatch.setenv("REMEDY_TORCH_THREADS", "1")
    CACHED_CLIENT.cache_clear()
    yield fake
    fake.close()
    CACHED_CLIENT.cache_clear()


def cloud_spec(tmp_path: Path, **fields: object) -> RunSpec:
    """A script job (source_dir with train.py) for the cloud backend; fields of
    run_spec.sagemaker may be given by their names."""
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('training')\n")
    (code / "model.py").write_text("WIDTH = 4\n")
    cloud = {"sm_role": ROLE, "bucket": BUCKET, "region": REGION, "instance_type": "ml.g5.xlarge"}
    cloud |= {name: fields.pop(name) for name in list(fields) if name in SageMakerSpec.model_fields}
    values: dict[str, object] = {
        "backend": "sagemaker",
        "sagemaker": cloud,
        "source_dir": str(code),
        "entry_point": "train.py",
        "hyperparameters": {"lr": 0.1, "optimizer": "adam", "tied": True, "sizes": [2, 3]},
        "hyperparameter_roles": {"learning_rate": "lr"},
        # One rule, the seed's: the stores these tests write hold losses and gradients,
        # not the weights the default set (the recommended preset) reads too.
        "rules": [exploding_tensor_rule().model_dump(mode="json")],
    }
    return RunSpec.model_validate(values | fields)

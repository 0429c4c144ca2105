"""s3:// stores against moto's real S3 server (no mocks of boto3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import torch

from remedy.debugger import (
    CorruptStepFile,
    Hook,
    RuleStatus,
    SaveConfig,
    create_trial,
    read_statuses,
)
from remedy.debugger.readers.s3 import _READ_AHEAD, S3StoreReader
from remedy.debugger.trial import Trial
from tests.debugger import scenarios as sc
from tests.debugger.helpers import (
    EXPLODING_LR,
    first_nonfinite,
    one_file_per_step,
    start_evaluator,
    train,
)

BUCKET = "remedy-tensors"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A fresh bucket prefix per test; the environment points boto3 at the server."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    client = boto3.client("s3")
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    return f"s3://{BUCKET}/jobs/{request.node.name}"


def keys(uri: str) -> list[str]:
    prefix = uri.removeprefix(f"s3://{BUCKET}/")
    listing = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"][len(prefix) + 1 :] for item in listing.get("Contents", []))


def test_steps_are_uploaded_during_training_and_read_incrementally(s3: str) -> None:
    every = SaveConfig(save_interval=1)
    hook = Hook(s3, collections={"losses": every, "gradients": every, "weights": every})
    model = sc.mlp([4, 8, 1])
    criterion = torch.nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(opt)
    x, y = sc.regression(16)
    trial = create_trial(s3)
    assert trial.steps() == []
    grads = []
    for step in range(4):
        opt.zero_grad()
        criterion(model(x), y).backward()
        grads.append(model[0].weight.grad.clone().numpy())
        opt.step()
        hook.flush()  # uploaded now, while the job runs
        assert trial.refresh() == 1
        assert trial.steps() == list(range(step + 1))
        assert not trial.has_ended
    assert "end.json" not in keys(s3)
    hook.close()
    assert "end.json" in keys(s3)
    assert "steps/TRAIN/000000000003.safetensors" in keys(s3)
    trial.refresh()
    assert trial.has_ended
    for step, grad in enumerate(grads):
        np.testing.assert_array_equal(trial.tensor("gradient/0.weight").value(step), grad)
    assert trial.tensor_names(collection="weights") == ["0.weight", "2.weight"]
    assert trial.tensor("loss").value(3).shape == ()
    with pytest.raises(FileExistsError):
        Hook(s3)


def recorded_trial(s3: str) -> tuple[Trial, list[int]]:
    """A trial over the store whose reader records the bytes of each step-file GET."""
    fetched: list[int] = []
    reader = S3StoreReader(s3)
    original = reader._client.get_object

    def recording_get(**kwargs: Any) -> Any:
        response = original(**kwargs)
        if str(kwargs["Key"]).endswith(".safetensors"):
            fetched.append(response["ContentLength"])
        return response

    reader._client.get_object = recording_get  # type: ignore[method-assign]
    return Trial(reader), fetched


def test_one_tensor_is_fetched_without_the_rest_of_the_step(s3: str) -> None:
    hook = Hook(s3, collections={"big": SaveConfig(save_interval=1)})
    model = sc.mlp([2, 1])
    hook.register_module(model)
    model(torch.ones(1, 2))
    big = np.arange(250_000, dtype=np.float32).reshape(500, 500)
    hook.save_tensor("big", big, collection="big")
    hook.save_tensor("small", np.array([1.5, 2.5], dtype=np.float64), collection="big")
    hook.close()

    trial, fetched = recorded_trial(s3)
    np.testing.assert_array_equal(trial.tensor("small").value(0), [1.5, 2.5])
    # the header, then 16 bytes: the 1 MB neighbour stays in the bucket
    assert len(fetched) == 2 and fetched[1] == 16
    assert sum(fetched) < 70_000
    np.testing.assert_array_equal(trial.tensor("big").value(0), big)


def test_every_tensor_of_a_step_is_read_in_a_few_gets(s3: str) -> None:
    # A rule reading every tensor (ExplodingTensor) reads them in name order, the file's
    # order: a GET per tensor made a cloud run's evaluator fall half a minute behind its job.
    hook = Hook(s3, collections={"many": SaveConfig(save_interval=1)})
    model = sc.mlp([2, 1])
    hook.register_module(model)
    model(torch.ones(1, 2))
    arrays = {f"t{i:02d}": np.full(10_000, i, dtype=np.float32) for i in range(40)}  # 40 kB each
    for name, array in arrays.items():
        hook.save_tensor(name, array, collection="many")
    hook.close()

    trial, fetched = recorded_trial(s3)
    for name, array in arrays.items():
        np.testing.assert_array_equal(trial.tensor(name).value(0), array)
    # 1.6 MB: the header's GET, then windows of the read-ahead; no byte fetched twice
    assert len(fetched) <= 1 + 1_600_000 // _READ_AHEAD + 1 < len(arrays) // 4
    assert sum(fetched) < 1_600_000 + 65_536 + 8_000


def test_a_truncated_or_foreign_object_is_never_read_as_a_step(
    s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_file_per_step(monkeypatch)
    hook = Hook(s3, collections={"losses": SaveConfig(save_interval=1)})
    train(hook, steps=2)
    hook.close()
    prefix = s3.removeprefix(f"s3://{BUCKET}/")
    client = boto3.client("s3")
    good = client.get_object(Bucket=BUCKET, Key=f"{prefix}/steps/TRAIN/000000000001.safetensors")
    body = good["Body"].read()
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/steps/EVAL/000000000000.safetensors",
                      Body=body[: len(body) // 2])  # fmt: skip
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/steps/EVAL/000000000001.safetensors",
                      Body=b"garbage")  # fmt: skip
    # Never skipped silently: the object is named, with what is wrong with it.
    with pytest.raises(CorruptStepFile, match=r"EVAL/000000000000\.safetensors: .*past the end"):
        create_trial(s3)
    client.delete_object(Bucket=BUCKET, Key=f"{prefix}/steps/EVAL/000000000000.safetensors")
    with pytest.raises(CorruptStepFile, match=r"EVAL/000000000001\.safetensors: not a debugger"):
        create_trial(s3)
    client.delete_object(Bucket=BUCKET, Key=f"{prefix}/steps/EVAL/000000000001.safetensors")
    trial = create_trial(s3)
    assert trial.steps() == [0, 1]
    assert trial.steps("EVAL") == []


def test_the_evaluator_stops_a_job_writing_to_s3(s3: str, tmp_path: Path) -> None:
    stop_file = tmp_path / "stop.json"
    rules = [
        {
            "name": "GradientsExplode",
            "rule": "ExplodingTensor",
            "parameters": {"tensor_regex": ".*gradient"},
            "actions": ["StopTraining"],
        }
    ]
    proc, status_dir = start_evaluator(s3, rules, tmp_path, stop_file)  # type: ignore[arg-type]
    try:
        every = SaveConfig(save_interval=1)
        hook = Hook(s3, collections={"losses": every, "gradients": every})
        log = train(hook, steps=0, lr=EXPLODING_LR, stop_file=stop_file, max_seconds=120)
        hook.close()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert log.stopped_by_file
    status = read_statuses(status_dir)["GradientsExplode"]
    assert status.status is RuleStatus.ISSUES_FOUND
    assert (status.step, status.tensor) == first_nonfinite(log)
    assert json.loads(stop_file.read_text())["rule"] == "GradientsExplode"

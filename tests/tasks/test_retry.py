"""Which failures the backend-calling tasks retry, and that they declare it."""

from __future__ import annotations

import pytest

from remedy.tasks.monitor import monitor
from remedy.tasks.notify import deliver_to
from remedy.tasks.retry import is_transient, transient
from remedy.tasks.stop import stop_job
from remedy.tasks.train import launch_job


class ClientError(Exception):
    """botocore's ClientError carries the service's answer as `response`."""

    def __init__(self, code: str, status: int) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


class EndpointConnectionError(Exception):
    pass


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (ConnectionRefusedError("refused"), True),
        (TimeoutError("timed out"), True),
        (EndpointConnectionError("no route"), True),
        (ClientError("ThrottlingException", 400), True),
        (ClientError("InternalFailure", 500), True),
        (ClientError("ValidationException", 400), False),
        (ValueError("no such entry point"), False),
        (FileNotFoundError("train.py"), False),
    ],
)
def test_only_an_outage_is_retried(error: BaseException, retried: bool) -> None:
    assert is_transient(error) is retried


@pytest.mark.parametrize("task", [launch_job, monitor, stop_job])
def test_backend_calls_declare_retries_on_outages(task) -> None:
    assert task.retries == 2 and task.retry_condition_fn is transient


def test_each_notification_target_is_retried() -> None:
    assert deliver_to.retries == 2 and deliver_to.retry_condition_fn is None

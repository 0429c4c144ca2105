"""When a task's failure is worth retrying: an outage of a backend, not a bad input.

Tasks that call a job backend (launch, describe, stop) declare
`retries=..., retry_condition_fn=transient` on their decorator: a dropped connection, a
timeout or the cloud service's throttling and 5xx answers are retried; anything else (a
missing entry point, a refused spec) fails at once, as retrying would only repeat it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

# botocore's transient errors, named so that this module needs no boto3 installed.
TRANSIENT_BOTO_ERRORS = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
    }
)
TRANSIENT_CLOUD_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "InternalFailure",
        "InternalServerError",
    }
)


def is_transient(error: BaseException | None) -> bool:
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    if type(error).__name__ in TRANSIENT_BOTO_ERRORS:
        return True
    response = getattr(error, "response", None)  # botocore ClientError
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in TRANSIENT_CLOUD_CODES or status >= 500
    return False


def transient(task: Any, task_run: Any, state: Any) -> bool:
    """retry_condition_fn: retry only a failure caused by a transient error."""
    return is_transient(state.result(raise_on_failure=False))


class TaskRetries(TypedDict):
    """The retry options of prefect's @task, typed so that **BACKEND_RETRIES type-checks."""

    retries: int
    retry_delay_seconds: list[float]
    retry_condition_fn: Callable[[Any, Any, Any], bool]


# What backend-calling tasks declare: two more tries, 5 then 30 s later.
BACKEND_RETRIES: TaskRetries = {
    "retries": 2,
    "retry_delay_seconds": [5, 30],
    "retry_condition_fn": transient,
}

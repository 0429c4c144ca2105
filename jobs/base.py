"""The small interface every job backend implements: launch / describe / stop / logs.

describe() returns a dict shaped like the cloud service's DescribeTrainingJob response
(TrainingJobName, TrainingJobStatus, FailureReason, DebugRuleEvaluationStatuses, ...), so
the monitor reads every backend the same way.
"""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

from remedy.state_schema import RunSpec


class RuleEvaluationStatus(TypedDict, total=False):
    RuleConfigurationName: str
    RuleEvaluationStatus: str
    StatusDetails: str
    LastModifiedTime: str
    step: int | None
    mode: str | None
    tensor: str | None


class JobDescription(TypedDict, total=False):
    TrainingJobName: str
    TrainingJobStatus: str
    SecondaryStatus: str
    FailureReason: str
    CreationTime: str
    TrainingStartTime: str
    TrainingEndTime: str
    DebugRuleEvaluationStatuses: list[RuleEvaluationStatus]
    FinalMetricDataList: list[dict[str, Any]]
    Progress: dict[str, Any]  # ours: latest step, epoch, loss of the running job


class JobNotFound(LookupError):
    pass


# Failure reasons start with the cloud service's error class. Only these are worth an
# unchanged relaunch; an AlgorithmError (the training code raised) is not.
INFRASTRUCTURE_FAILURES = ("InternalServerError", "CapacityError", "ResourceLimitExceeded")


def is_infrastructure_failure(reason: str | None) -> bool:
    return bool(reason) and reason.startswith(INFRASTRUCTURE_FAILURES)


class JobBackend(Protocol):
    def launch(self, job_name: str, spec: RunSpec) -> None:
        """Start the job; launching a name that exists already does nothing."""

    def exists(self, job_name: str) -> bool: ...

    def describe(self, job_name: str) -> JobDescription: ...

    def stop(self, job_name: str) -> None:
        """Ask the job to stop, wait for it to end (graceful, then forced)."""

    def logs(self, job_name: str, tail: int = 50) -> str: ...

"""DescribeTrainingJob's answer as the typed snapshot every backend returns.

The service's words are the flow's (InProgress, Completed, Failed, Stopping, Stopped), its
failure reasons begin with the error class ("AlgorithmError: ...", "CapacityError: ...")
that jobs.base.is_infrastructure_failure reads, and the secondary status says where the
job is (Starting, Downloading, Training, Uploading, Interrupted, MaxRuntimeExceeded, ...).
Text from the service is scrubbed of the bucket and role ARN before it is kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from remedy.jobs.base import JobSnapshot, Progress, RuleEvaluation
from remedy.state_schema import JobStatus

ARN = re.compile(r"arn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:\d{12}:[^\s\"',]+")


def scrub(text: str | None, *private: str | None) -> str | None:
    """The text without the account's resource names (bucket, role ARN, any ARN)."""
    if text is None:
        return None
    for value in private:
        if value:
            text = text.replace(value, "<hidden>")
    return ARN.sub("arn:<hidden>", text)


def status_message(described: dict[str, Any]) -> str | None:
    transitions = described.get("SecondaryStatusTransitions") or []
    return transitions[-1].get("StatusMessage") if transitions else None


def final_metrics(described: dict[str, Any], percent: Iterable[str] = ()) -> dict[str, float]:
    """FinalMetricDataList: the last value of each MetricDefinition the service found;
    those named in `percent` (defined with "percent": true) as fractions."""
    found = {}
    percent = set(percent)
    for metric in described.get("FinalMetricDataList") or []:
        value = metric.get("Value")
        if isinstance(value, (int, float)) and value == value and abs(value) != float("inf"):
            name = metric["MetricName"]
            found[name] = float(value) / 100 if name in percent else float(value)
    return found


def job_snapshot(
    name: str,
    described: dict[str, Any],
    rules: list[RuleEvaluation],
    progress: Progress | None,
    metrics: dict[str, float],
    private: tuple[str | None, ...] = (),
    percent: Iterable[str] = (),
) -> JobSnapshot:
    return JobSnapshot(
        name=name,
        status=JobStatus(described["TrainingJobStatus"]),
        failure_reason=scrub(described.get("FailureReason"), *private),
        secondary_status=described.get("SecondaryStatus"),
        status_message=scrub(status_message(described), *private),
        created=described.get("CreationTime"),
        started=described.get("TrainingStartTime"),
        ended=described.get("TrainingEndTime"),
        billable_s=described.get("BillableTimeInSeconds"),
        rules=rules,
        progress=progress,
        final_metrics=metrics | final_metrics(described, percent),
    )

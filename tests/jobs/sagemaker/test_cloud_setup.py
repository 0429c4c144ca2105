"""infra/cloud's policies (the one-time setup infra/README.md describes) allow every call
remedy's code makes: the orchestrator's (the backend, its watcher, the store's reader) and
the job's (its entry program, the store's writer). The calls are read from the code, so a
new call without its permission fails here, not in a user's account."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import botocore.session
from botocore import xform_name

REPO = Path(__file__).resolve().parents[3]
CLOUD = REPO / "infra/cloud"
SERVICES = ("s3", "sagemaker", "logs")
# S3 operations whose permission has another name (the service's authorization reference).
S3_PERMISSIONS = {
    "ListObjectsV2": ("s3:ListBucket",),
    "HeadObject": ("s3:GetObject",),
    "CopyObject": ("s3:GetObject", "s3:PutObject"),
}
ORCHESTRATOR = [
    "jobs/sagemaker/backend.py",
    "jobs/sagemaker/watcher.py",
    "jobs/sagemaker/reports.py",
    "jobs/sagemaker/source.py",
    "debugger/readers/s3.py",
    "debugger/s3.py",
]
JOB = ["jobs/sagemaker/container_entry.py", "debugger/s3.py"]


@cache
def operations() -> dict[str, list[tuple[str, str]]]:
    """boto3 method name -> (service, operation) for the services remedy calls."""
    session = botocore.session.get_session()
    found: dict[str, list[tuple[str, str]]] = {}
    for service in SERVICES:
        for operation in session.get_service_model(service).operation_names:
            found.setdefault(xform_name(operation), []).append((service, operation))
    return found


def calls(files: list[str]) -> set[tuple[str, str]]:
    """(service, operation) of every client method, or paginator, the files call."""
    found = set()
    for name in files:
        text = (REPO / name).read_text()
        methods = re.findall(r"(?<!self)\.([a-z0-9_]+)\(", text)  # not our own methods
        methods += re.findall(r"get_paginator\(\s*\"([a-z0-9_]+)\"", text)
        for method in methods:
            found.update(operations().get(method, []))
    return found


def permissions(service: str, operation: str) -> tuple[str, ...]:
    if service == "s3":
        return S3_PERMISSIONS.get(operation, (f"s3:{operation}",))
    return (f"{service}:{operation}",)


def allowed(policy: str) -> set[str]:
    document = json.loads((CLOUD / policy).read_text())
    assert document["Version"] == "2012-10-17"
    found = set()
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow"
        action = statement["Action"]
        found.update([action] if isinstance(action, str) else action)
    return found


def test_the_orchestrators_policy_allows_every_call_of_the_backend() -> None:
    used = calls(ORCHESTRATOR)
    assert {("sagemaker", "CreateTrainingJob"), ("sagemaker", "StopTrainingJob"),
            ("logs", "GetLogEvents"), ("s3", "CopyObject")} <= used  # fmt: skip
    needed = {p for call in used for p in permissions(*call)}
    needed |= {"iam:PassRole", "sagemaker:AddTags"}  # a job's role, and its Tags
    assert needed - allowed("orchestrator-policy.json") == set()


def test_the_jobs_role_allows_every_call_of_the_job() -> None:
    used = calls(JOB)
    assert ("s3", "PutObject") in used
    needed = {p for call in used for p in permissions(*call)}
    assert needed - allowed("job-role-policy.json") == set()
    trust = json.loads((CLOUD / "trust-policy.json").read_text())["Statement"][0]
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}

"""Per-rule status files: the evaluator writes them, job backends read them.

`<status_dir>/<RuleConfigurationName>.json`, written atomically, shaped like one entry of
DescribeTrainingJob's DebugRuleEvaluationStatuses plus where the rule fired:

    {"RuleConfigurationName": "ExplodingTensor", "RuleEvaluationStatus": "IssuesFound",
     "StatusDetails": "...", "LastModifiedTime": "2026-01-01T00:00:00.000Z",
     "step": 12, "mode": "TRAIN", "tensor": "gradient/fc.weight", "steps_evaluated": 13}

"rule" is the rule's class (the name is the user's choice): what a repair is chosen by.
step/mode are set where the rule fired (IssuesFound) or raised (Error); tensor only when
a finding names one; "worker" (e.g. "worker_1") only in a job of several processes, for the
process whose tensors it fired on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from remedy.debugger import store
from remedy.debugger.modes import ModeKeys


class RuleStatus(StrEnum):
    IN_PROGRESS = "InProgress"
    NO_ISSUES_FOUND = "NoIssuesFound"
    ISSUES_FOUND = "IssuesFound"
    ERROR = "Error"
    STOPPING = "Stopping"
    STOPPED = "Stopped"

    @property
    def is_final(self) -> bool:
        return self not in (RuleStatus.IN_PROGRESS, RuleStatus.STOPPING)


@dataclass
class RuleStatusRecord:
    name: str
    status: RuleStatus
    details: str
    step: int | None = None
    mode: ModeKeys | None = None
    tensor: str | None = None
    steps_evaluated: int = 0
    last_modified: str | None = None  # set when written
    worker: str | None = None  # a job of several processes: where the rule fired
    rule: str | None = None  # the rule's class (the name is the user's choice)

    def to_json(self) -> dict[str, Any]:
        data = {
            "RuleConfigurationName": self.name,
            "RuleEvaluationStatus": self.status.value,
            "StatusDetails": self.details,
            "LastModifiedTime": self.last_modified or store.utc_now_iso(),
            "step": self.step,
            "mode": None if self.mode is None else self.mode.value,
            "tensor": self.tensor,
            "steps_evaluated": self.steps_evaluated,
        }
        if self.worker is not None:
            data["worker"] = self.worker
        if self.rule is not None:
            data["rule"] = self.rule
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RuleStatusRecord:
        mode = data.get("mode")
        return cls(
            name=data["RuleConfigurationName"],
            status=RuleStatus(data["RuleEvaluationStatus"]),
            details=data.get("StatusDetails", ""),
            step=data.get("step"),
            mode=None if mode is None else ModeKeys(mode),
            tensor=data.get("tensor"),
            steps_evaluated=data.get("steps_evaluated", 0),
            last_modified=data.get("LastModifiedTime"),
            worker=data.get("worker"),
            rule=data.get("rule"),
        )


def status_path(status_dir: str | os.PathLike[str], name: str) -> Path:
    return Path(status_dir) / f"{name}.json"


def write_status(status_dir: str | os.PathLike[str], record: RuleStatusRecord) -> None:
    record.last_modified = store.utc_now_iso()
    store.write_json(status_path(status_dir, record.name), record.to_json())


def read_statuses(status_dir: str | os.PathLike[str]) -> dict[str, RuleStatusRecord]:
    """All status files in a folder, by rule configuration name (empty if none yet)."""
    folder = Path(status_dir)
    if not folder.is_dir():
        return {}
    records = {}
    for path in sorted(folder.glob("[!.]*.json")):  # dot-prefixed = temp files
        data = store.read_json(path)
        if data is not None:
            record = RuleStatusRecord.from_json(data)
            records[record.name] = record
    return records

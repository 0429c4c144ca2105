"""Where a local job keeps its files: one folder per job under <run_dir>/jobs/."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remedy.state_schema import write_atomic
from remedy.state_schema.job_env import (
    METRICS_FILE,
    PROGRESS_FILE,
    RESULT_FILE,
    RULE_STATUS_DIR,
)


@dataclass(frozen=True)
class JobPaths:
    root: Path

    @property
    def job(self) -> Path:  # launch record: name, spec, time; its presence means "launched"
        return self.root / "job.json"

    @property
    def hyperparameters(self) -> Path:
        return self.root / "hyperparameters.json"

    @property
    def debugger_config(self) -> Path:
        return self.root / "debugger.json"

    @property
    def rules(self) -> Path:
        return self.root / "rules.json"

    @property
    def tensors(self) -> Path:
        return self.root / "tensors"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def model(self) -> Path:  # SM_MODEL_DIR: the final model
        return self.root / "model"

    @property
    def output_data(self) -> Path:  # SM_OUTPUT_DATA_DIR: the job's other outputs
        return self.root / "output"

    @property
    def rule_status(self) -> Path:
        return self.root / RULE_STATUS_DIR

    @property
    def status(self) -> Path:  # written only by the supervisor
        return self.root / "status.json"

    @property
    def supervisor_pid(self) -> Path:
        return self.root / "supervisor.pid"

    @property
    def stop_request(self) -> Path:  # its presence asks the training process to stop
        return self.root / "stop_request"

    @property
    def continue_request(self) -> Path:  # its presence lets a job held at its bound go on
        return self.root / "continue_request"

    @property
    def progress(self) -> Path:
        return self.root / PROGRESS_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def result(self) -> Path:
        return self.root / RESULT_FILE

    @property
    def log_metrics(self) -> Path:  # metric records found in the log (log_metrics.py)
        return self.root / "log_metrics.jsonl"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def training_log(self) -> Path:
        return self.logs / "training.log"

    @property
    def evaluator_log(self) -> Path:
        return self.logs / "evaluator.log"

    @property
    def supervisor_log(self) -> Path:
        return self.logs / "supervisor.log"


def read_json(path: Path) -> Any | None:
    """A JSON file or None when it is absent (all our files are written atomically)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def read_json_written_by_job(path: Path) -> Any | None:
    """Like read_json, for files a user's entry point may write non-atomically:
    a half-written file reads as absent until it is whole."""
    try:
        return read_json(path)
    except json.JSONDecodeError:
        return None


# An exception line ("ValueError: ...", "torch.OutOfMemoryError: ..."), or the interpreter's own.
ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b|Fatal Python error)")


def error_line(path: Path, passed_over: tuple[str, ...] = ()) -> str:
    """What a process said last about its end, from its log: the last exception line of
    its last 200 lines, else its last unindented line (lines starting with `passed_over`,
    e.g. the launcher's own closing words, left out)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()[-200:]
    except FileNotFoundError:
        return f"no {path.name}"
    lines = [line for line in lines if line.strip() and not line.startswith(passed_over)]
    for line in reversed(lines):
        if ERROR_LINE.match(line):
            return line.strip()[:500]
    for line in reversed(lines):
        if not line.startswith((" ", "\t")):
            return line.strip()[:500]
    return f"no output in {path.name}"


def write_request(path: Path, **fields: Any) -> None:
    """A request file the job watches (stop_request, continue_request), once: who asked and
    when, and any `fields` of the request (a continue's further bound). OSError where it
    cannot be written (a full disk)."""
    if not path.exists():
        request = {"requested_by": "backend", "time": datetime.now(UTC).isoformat(), **fields}
        write_atomic(path, json.dumps(request))

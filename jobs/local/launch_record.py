"""job.json, a local job's launch record: what its supervisor runs and how it ends the job.

launch() writes it last, into the job's folder, so its presence means "launched"; the
supervisor (supervisor.py) runs from it, and the backend reads when the job was created
and how a stop escalates. A Slurm job's record is the same, its command the allocation's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from remedy.state_schema import MetricDefinition, write_atomic


class LaunchRecordError(ValueError):
    """A job.json that is not a launch record (damaged, or written by hand)."""


class LaunchRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_name: str
    entry_point: str
    created: str  # ISO 8601, UTC
    # the supervisor finds these in the training log (log_metrics.py)
    metric_definitions: list[MetricDefinition] = []
    command: list[str]
    cwd: str
    env: dict[str, str]
    # from the run_spec, whose defaults they are: a stop request, then SIGTERM after
    # stop_grace_s, then SIGKILL kill_after_s later
    stop_grace_s: float
    kill_after_s: float
    gpus_per_job: int | None
    progress_timeout_s: float | None
    progress_timeout: Literal["adaptive", "fixed"]
    evaluator_poll_interval: float = 0.5  # seconds between the rule evaluator's passes

    @classmethod
    def read(cls, path: Path) -> LaunchRecord | None:
        """The record at path; None where there is none (the job was never launched)."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            raise LaunchRecordError(f"{path}: not a launch record: {error}") from None

    def write(self, path: Path) -> None:
        write_atomic(path, self.model_dump_json(indent=2))

"""The job boundary: what every backend does (launch / describe / stop / logs / artefacts)
and the typed snapshot describe() returns, so the flow reads every backend the same way.

A backend owns its jobs' files: nothing outside it reads where a job keeps its metrics,
checkpoints, tensors or logs; it asks the backend.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from remedy.debugger import Trial, create_trial
from remedy.debugger.rules import reads_the_loss
from remedy.debugger.status import RuleStatus
from remedy.state_schema import CHECKPOINT_META_FILE, Checkpoint, JobStatus, RunSpec

# A rule's own status word (the debugger's vocabulary), apart from the payload's RuleStatus.
RuleWord = RuleStatus

RULE_STATUS_WORDS = frozenset(status.value for status in RuleStatus)
FINAL_JOB_STATUSES = (JobStatus.Completed, JobStatus.Failed, JobStatus.Stopped)

# Failure reasons start with the cloud service's error class. Only these are worth an
# unchanged relaunch; an AlgorithmError (the training code raised) is not.
INFRASTRUCTURE_FAILURES = ("InternalServerError", "CapacityError", "ResourceLimitExceeded")


def is_infrastructure_failure(reason: str | None) -> bool:
    return bool(reason and reason.startswith(INFRASTRUCTURE_FAILURES))


class JobNotFound(LookupError):
    pass


class Snapshot(BaseModel):
    # Backends pass on what their sources say; fields we do not model are dropped.
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class RuleEvaluation(Snapshot):
    """One rule's status: an entry of the cloud service's DebugRuleEvaluationStatuses, plus
    where it fired and what the NaN guard adds to its own finding."""

    name: str = Field(alias="RuleConfigurationName")
    rule: str | None = Field(None, description="The rule's class (the name is the user's).")
    status: RuleStatus = Field(
        alias="RuleEvaluationStatus",
        description="The debugger's status word (the cloud service's are the same); a word "
        "outside it reads as Error, naming it.",
    )
    details: str = Field("", alias="StatusDetails")
    step: int | None = None
    mode: str | None = None
    tensor: str | None = None
    bundle: str | None = Field(None, description="NaN guard: repro bundle folder.")
    localisation: str | None = Field(None, description="NaN guard: first non-finite module.")
    suspect_samples: list[int] = Field(default_factory=list)
    suspect_shards: list[str] = Field(default_factory=list)
    data_problem: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _unknown_word_is_an_error(cls, data: Any) -> Any:
        """A status file or service answer with a word the debugger never writes is not
        silently pending for ever: it is an Error that names the word."""
        if not isinstance(data, dict):
            return data
        key = "RuleEvaluationStatus" if "RuleEvaluationStatus" in data else "status"
        word = data.get(key)
        if word is None or word in RULE_STATUS_WORDS:
            return data
        details = data.get("StatusDetails", data.get("details", ""))
        said = f"an unknown rule status word {word!r}" + (f" ({details})" if details else "")
        return {**data, key: RuleStatus.ERROR, "StatusDetails": said, "details": said}

    @property
    def is_final(self) -> bool:
        """Its status will not change."""
        return self.status.is_final

    @property
    def reads_the_loss(self) -> bool:
        """Its rule (the class, else the name: earlier statuses lack it) reads the loss."""
        return reads_the_loss(self.rule or self.name)

    def as_error(self, details: str) -> RuleEvaluation:
        """This rule as one that can never judge now, saying why."""
        return self.model_copy(update={"status": RuleStatus.ERROR, "details": details})


class Progress(Snapshot):
    """The running job's latest step, as its progress file (or metrics) reports it."""

    step: int = 0
    start_step: int = Field(0, description="Steps already done at launch (warm start).")
    total_steps: int | None = None
    steps_per_epoch: int | None = Field(
        None, description="Updates per epoch: the built-in job's, a script's first DataLoader pass."
    )
    epoch: int | None = None
    optimizers: int | None = Field(
        None, description="Optimizers stepping parameters of their own, 2 or more (a GAN)."
    )
    hold_at: int | None = Field(
        None,
        description="Where the job holds to be asked (an eighth, a quarter or half its "
        "length), as it said once it measured its epoch (run_spec.hold_by_epochs); gone "
        "once continued.",
    )
    epoch_unmeasured: bool = Field(
        False,
        description="Told to hold by its epochs (run_spec.hold_by_epochs), the job made its "
        "first update from no DataLoader batch: it cannot measure an epoch, so never holds.",
    )
    loss: float | None = Field(None, description="Latest training loss; None: non-finite.")
    first_loss: float | None = Field(None, description="Training loss at the first step.")
    first_losses: list[float] = Field(
        default_factory=list, description="The launch's first finite training losses (up to 20)."
    )
    last_losses: list[float] = Field(
        default_factory=list, description="Its latest finite training losses (up to 20)."
    )

    @property
    def steps_run(self) -> int:
        return max(self.step - self.start_step, 0)


class JobSnapshot(Snapshot):
    """What describe() returns: the job's status, its rules' statuses and its progress."""

    name: str
    status: JobStatus
    failure_reason: str | None = None
    secondary_status: str | None = Field(
        None, description="Where the job is within its status: Starting, Training, ..."
    )
    status_message: str | None = Field(
        None, description="Why it is there, when that is news (e.g. waiting for a GPU)."
    )
    created: datetime | None = None
    started: datetime | None = None
    ended: datetime | None = None
    billable_s: int | None = Field(
        None, description="Seconds the cloud service bills the job for (None: local)."
    )
    backend_job_id: str | None = Field(
        None, description="The job's id in its scheduler (a Slurm job id); None: none."
    )
    queue_wait_s: float | None = Field(
        None, description="Seconds the job waited in its scheduler's queue before it ran."
    )
    requeues: int | None = Field(
        None, description="Times its scheduler requeued the job (Slurm); None: none can."
    )
    rules: list[RuleEvaluation] = Field(default_factory=list)
    progress: Progress | None = None
    final_metrics: dict[str, float] = Field(
        default_factory=dict, description="'train:loss', 'test:loss', 'test:accuracy', ..."
    )

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_JOB_STATUSES


class JobBackend(ABC):
    """One place jobs run. Subclasses set `name` and register with @register_backend."""

    name: ClassVar[str]
    # Whether the job runs its code from this machine's folders (local processes, a cluster
    # sharing them), so preflight looks for the code and warm start here; a backend
    # that uploads source_dir elsewhere has only the uploaded script checked.
    code_runs_here: ClassVar[bool] = False
    # Whether a job bounded by run_spec.max_updates holds at its bound, to be continued
    # (continue_job) or stopped: a probe kept as the full run loses none of its updates.
    can_continue: ClassVar[bool] = False
    # The model of the backend's own fields, run_spec.<name> (None: it has none); registered
    # with the payload's schema together with the name.
    options: ClassVar[type[BaseModel] | None] = None

    def __init__(self, run_dir: str | Path) -> None:
        # The run's folder, where a backend may keep its jobs. Absolute: a job runs in its own
        # working directory (source_dir), where a relative path would point elsewhere.
        self.run_dir = Path(run_dir).absolute()

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        """Refuse a spec this backend could never launch (ValueError naming the field),
        before anything is created. Every flow run calls it first; the default takes any."""
        return None

    @abstractmethod
    def launch(self, job_name: str, spec: RunSpec) -> None:
        """Start the job; launching a name that exists already does nothing."""

    @abstractmethod
    def exists(self, job_name: str) -> bool: ...

    @abstractmethod
    def describe(self, job_name: str) -> JobSnapshot:
        """Raises JobNotFound for a job this backend never launched."""

    @abstractmethod
    def stop(self, job_name: str) -> None:
        """Ask the job to stop, wait for it to end (graceful, then forced)."""

    def room_beside(self, spec: RunSpec, others: int) -> bool:
        """Whether a job of `spec` held waiting (can_continue) leaves room for `others` more
        like it to run meanwhile (the probes of a run asked at half its length): a held job
        keeps what it was given, and probes waiting for it would wait on the flow, which
        waits on them. The default: as far as the backend can hold a job at all."""
        return self.can_continue

    def continue_job(self, job_name: str, until: int | None = None) -> None:
        """Let a job held at its bound train on to its own end (can_continue backends), or
        to `until` updates of its launch, where it holds again; asking twice does nothing
        more."""
        raise NotImplementedError(f"the {self.name} backend cannot continue a job")

    @abstractmethod
    def logs(self, job_name: str, tail: int = 50) -> str: ...

    @abstractmethod
    def metrics(self, job_name: str) -> list[dict[str, Any]]:
        """The job's metric records ({"type": "step"|"epoch", "step": ..., ...}; {"type":
        "metric", "name": ..., "value": ..., "step": ...} for a metric of its own), in the
        order written, per source."""

    @abstractmethod
    def metrics_location(self, job_name: str) -> str:
        """Where the job's metrics live (a path relative to the run folder, or a URI)."""

    @abstractmethod
    def checkpoints(self, job_name: str) -> list[Checkpoint]:
        """Checkpoints the job wrote, oldest first, each usable as a warm start."""

    @abstractmethod
    def tensor_store(self, job_name: str) -> str | None:
        """The job's tensor store (a folder or s3:// URI for create_trial), None if none."""

    def trial(self, job_name: str) -> Trial | None:
        """The debugger's view of the job's tensor store; None when it saved none."""
        store = self.tensor_store(job_name)
        return None if store is None else create_trial(store)


def read_checkpoint(folder: Path) -> Checkpoint | None:
    """A checkpoint folder from its JSON sidecar (no tensor is loaded, torch not needed);
    None when it is half-written or not a checkpoint."""
    try:
        meta = json.loads((folder / CHECKPOINT_META_FILE).read_text())
        return Checkpoint(
            path=str(folder.resolve()), epoch=int(meta["epoch"]), step=int(meta["step"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None

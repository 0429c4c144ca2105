"""The state payload passed between the train, monitor and plan tasks.

Field names of the original workflow (history counters, next_action, job_status,
rule_status, run_spec and its seed fields) are a contract: a payload produced by the
original state machine validates unchanged. Everything we add has a default.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from remedy.state_schema.base import Strict
from remedy.state_schema.run_spec import (  # noqa: F401  (RunSpec lives in run_spec.py)
    RuleSpec,
    RunSpec,
    exploding_tensor_rule,
)


class NextAction(StrEnum):
    launch_new = "launch_new"
    monitor = "monitor"
    end = "end"


class JobStatus(StrEnum):
    """TrainingJobStatus words of the cloud service, used by every backend."""

    InProgress = "InProgress"
    Completed = "Completed"
    Failed = "Failed"
    Stopping = "Stopping"
    Stopped = "Stopped"


class RuleStatus(StrEnum):
    """A run's rule summary in the payload: the debugger's own words (debugger/status.py,
    read at the job boundary; tests/jobs/test_rule_words.py ties them), plus the summaries
    the original monitor wrote. The monitor maps the first into this in one place
    (observe)."""

    InProgress = "InProgress"
    NoIssuesFound = "NoIssuesFound"
    IssuesFound = "IssuesFound"
    Error = "Error"
    Stopping = "Stopping"
    Stopped = "Stopped"
    # Written by the original monitor: no rule status yet / anything unexpected /
    # after IssuesFound from its single ExplodingTensor rule.
    NotFound = "NotFound"
    Unknown = "Unknown"
    ExplodingTensors = "ExplodingTensors"


class DataProblem(Strict):
    """Samples that failed repeatedly: the records are bad, not the model."""

    samples: list[int] = Field(description="Training sample ids to leave out.")
    shards: list[str] = Field(default_factory=list, description="'file:index' of each sample.")
    failures: int = Field(2, ge=2, description="Failures (bad batches or attempts) seen on them.")


# The finding the monitor makes of a completed run whose model learned nothing while no rule
# fired (records/verdict.py, verdict_finding, says when): its rule and rule class. The policy
# repairs it as a rule's finding (a plateau: the rate is wrong, which way unknown).
NOT_TRAINED = "NotTrained"
# The other finding of a completed run (records/verdict.py, speeding_up, says when): its loss
# fell faster in its last third than in its middle third, as a run held back by a learning
# rate far too small does. Repaired as a stall: the rate goes up.
LEARNING_TOO_SLOWLY = "LearningTooSlowly"
# The verdict's open question (records/verdict.py, in_a_line, says when): a completed run whose
# loss still fell at its end about as fast as in its middle third: a rate far too small, or a
# healthy run stopped early. Probes at higher rates answer it (strategies/still_descending.py):
# one that learns clearly faster makes it a stall, repaired as one; none does, and the run
# was clean after all.
STILL_DESCENDING = "StillDescending"
# Its other question, asked of a launch held at a quarter of its length (records/
# asked_early.py, settled_question, says when): its loss fell fast, then levelled off, as on
# the noise floor of a rate far too high. Probes at lower rates answer it (strategies/
# still_descending.py): one that reaches its loss in a fraction of its updates makes it a
# rate too high, repaired as one; none does, and the held run goes on.
SETTLED_EARLY = "SettledEarly"
# The verdict's questions: findings only probes confirm (withdrawn when none answers).
QUESTIONS = frozenset({STILL_DESCENDING, SETTLED_EARLY})
# Findings judged at a run's end, not at a step where trouble began: nothing before them is
# a sound place to go on from, so a relaunch starts cold.
VERDICT_FINDINGS = frozenset({NOT_TRAINED, LEARNING_TOO_SLOWLY, *QUESTIONS})


class Finding(Strict):
    """A rule that reported IssuesFound (or Error), with where it fired."""

    rule: str = Field(description="The rule configuration's name (a user may choose it).")
    rule_class: str | None = Field(
        None,
        description="The rule's class (ExplodingTensor, LossSpike, ...): what the policy "
        "repairs by; null in payloads written before it was recorded (the name is used).",
    )
    status: RuleStatus = RuleStatus.IssuesFound
    step: int | None = None
    tensor: str | None = None
    message: str = ""
    bundle: str | None = Field(None, description="Repro bundle folder (`remedy repro BUNDLE`).")
    localisation: str | None = Field(
        None, description="First module whose output or gradient went non-finite."
    )
    suspect_samples: list[int] = Field(
        default_factory=list,
        description="Sample ids whose removal made the failing step finite.",
    )
    suspect_shards: list[str] = Field(
        default_factory=list, description="'file:index' of each suspect sample."
    )
    data_problem: DataProblem | None = None


# The cloud service's rule for job names; here they are also folder names, so a name can
# never reach outside the run directory ("../x" is not one).
JobName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9](-*[A-Za-z0-9]){0,62}$"),
    Field(description="Letters, digits and single dashes, at most 63 characters."),
]


class ResultKind(StrEnum):
    """What an attempt taught the policy (strategies/outcomes.py classifies it)."""

    diverged = "diverged"  # the loss or the gradients blew up: the rate was too high
    stalled = "stalled"  # updates far too small: the rate was too low
    plateaued = "plateaued"  # the loss stopped falling: the rate too low, or too high
    trained = "trained"  # it ran to its end, the loss clearly below the untrained model's
    no_effect = "no_effect"  # the same curve and finding as an earlier attempt
    outpaced = "outpaced"  # a probe stopped at its rung: another had learned far faster
    flawed = "flawed"  # another finding (dead units, overfitting, ...)
    failed = "failed"  # the job itself failed or was stopped from outside
    unknown = "unknown"  # ran to its end without a loss to judge, or still running


class AttemptKind(StrEnum):
    run = "run"  # a full launch of the job
    probe = "probe"  # a short candidate fix, stopped after a bounded number of updates


class AttemptResult(Strict):
    """An attempt's outcome, classified: "diverged at update 6", "trained to loss 2.31"."""

    kind: ResultKind
    update: int | None = Field(
        None, description="Update (counted over the whole run) where the finding began."
    )
    loss: float | None = Field(None, description="Windowed training loss at the end.")
    summary: str = ""


class Attempt(Strict):
    """One launched job: what ran, why, and how it ended."""

    job_name: JobName
    spec: RunSpec
    kind: AttemptKind = Field(
        AttemptKind.run,
        description="run: a full launch; probe: a short candidate fix the policy tried "
        "beside others before committing to a full relaunch.",
    )
    strategy: str | None = Field(None, description="Strategy that produced this spec.")
    strategy_reason: str | None = None
    changes: dict[str, list[Any]] = Field(
        default_factory=dict, description="Field -> [before, after] against the previous spec."
    )
    findings: list[Finding] = Field(default_factory=list)
    rule_errors: list[Finding] = Field(
        default_factory=list,
        description="Rules that could not judge the job (status Error: a rule that read no "
        "tensor, a broken rule): an attempt with one is never clean.",
    )
    steps_run: int = 0
    initial_loss: float | None = Field(
        None, description="Training loss at the job's first step (null: non-finite or unknown)."
    )
    final_loss: float | None = None
    # A probe's only: absent from other attempts' records.
    final_loss_spread: float | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="A probe's: standard deviation of the last losses whose mean is its "
        "final_loss (mini-batch noise): how far apart two probes' losses must be to rank them.",
    )
    final_accuracy: float | None = None
    # Windows, not one batch each: what "the model trained" is judged by (records/verdict.py).
    initial_window_loss: float | None = Field(
        None,
        description="Median training loss over the job's first loss_window steps (the "
        "untrained model's, on a cold start); null: unknown.",
    )
    final_window_loss: float | None = Field(
        None,
        description="Median training loss over the job's last loss_window steps; null: unknown.",
    )
    loss_window: int | None = Field(
        None, ge=1, description="Steps in each of those windows (at most 20, a quarter of the run)."
    )
    loss_thirds: list[float] = Field(
        default_factory=list,
        description="Median training loss of a window at the start, a third, two thirds and "
        "the end of a completed launch (from its step records): how its descent went. Empty: "
        "not completed, or too short to tell.",
    )
    rate_thirds: list[float] = Field(
        default_factory=list,
        description="Mean learning rate (the optimizer's first group's) over the middle and "
        "the last third of a completed launch's steps: whether its schedule was annealing "
        "the rate at its end. Empty: not completed, too short, or no rate recorded.",
    )
    loss_rises: float | None = Field(
        None,
        description="Share of the last third of a completed launch's steps whose loss rose "
        "over the step before: about half under mini-batch noise, near 0 for a full batch. "
        "Null: not completed, or too short to tell.",
    )
    gradient_agreement: list[float] = Field(
        default_factory=list,
        description="Mean cosine similarity of the gradients of updates 1 and 5 apart (in "
        "that order) over the last third of a completed launch's steps, sampled every few "
        "updates: near 0 once noise outweighs the mean gradient, as near a minimum. Empty: "
        "not completed, too short, or not measured.",
    )
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="Final metrics the job reported (test:accuracy, test:loss, train:loss, ...).",
    )
    outcome: JobStatus | None = None
    failure_reason: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_s: float | None = Field(None, description="Seconds from launch to end.")
    # A scheduler's job (Slurm) only: absent from other attempts' records.
    queue_wait_s: float | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Of duration_s, the seconds the job waited in its scheduler's queue.",
    )
    backend_job_id: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="The job's id in its scheduler (the Slurm job id).",
    )
    requeues: int | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Times the scheduler requeued the job (preemption, a failed node); each "
        "run after the first went on from the job's last checkpoint.",
    )
    start_step: int = Field(0, ge=0, description="Steps already done at launch (warm start).")
    held: bool = Field(
        False,
        exclude_if=lambda value: not value,
        description="A probe whose job held at its bound when judged (its backend can "
        "continue a job): the best one trains on as the next run, the others are stopped.",
    )
    hold_at: int | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="A cold-start run whose job holds after this many updates (an eighth, "
        "a quarter or half its known length) while the flow asks whether its model has "
        "begun to learn (records/asked_early.py); moved to the next such point once it was "
        "let go on, cleared past half.",
    )
    holds_by_its_epochs: bool = Field(
        False,
        exclude_if=lambda value: not value,
        description="A cold-start run launched to hold to be asked on a length counted in "
        "epochs (run_spec.hold_by_epochs): its job says where (hold_at) once it "
        "measured an epoch, and the monitor records it (and epoch_updates).",
    )
    epoch_updates: int | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="The updates of an epoch, as the job measured them where it held by "
        "its epochs: the run's length, for the next point it holds at once let go on.",
    )
    continues: JobName | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="A run that went on from a held probe's job (this job name's probe): its "
        "first updates are that probe's, counted here and not again (History.updates_spent).",
    )
    curve: str | None = Field(
        None,
        description="Where this job's metrics (loss curve) live: relative to the run dir, "
        "or a URI.",
    )
    loss_trace: list[float | None] = Field(
        default_factory=list,
        description="The first training losses of this launch (null: non-finite), to tell "
        "an attempt that changed nothing from one that did.",
    )
    grad_norm_median: float | None = Field(
        None,
        description="Median total gradient norm of this launch's updates before its "
        "finding (what a clipping threshold is set from).",
    )
    ramp_rate: float | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="The highest learning rate this launch's optimizer ran at, up to its "
        "finding or its end, where its schedule was still taking it up towards the rate "
        "it was given (a warmup's ramp) and had not reached it: the rate a divergence "
        "there proves too high (it closes the rate's bracket); a probe that trained there "
        "has shown half of it to hold (strategies/search_lr.py: held_rate). Null: no "
        "ramp, or no rate recorded.",
    )
    update_ratio: float | None = Field(
        None,
        description="Median over this launch's measured updates before its finding of "
        "how far an update moved its weights, as a fraction of them (the median over the "
        "weights), at the rate it was given: how far a search up may start "
        "(state_schema/update_ratio.py). Null where the job measured none.",
    )
    result: AttemptResult | None = Field(
        None, description="What this attempt taught the policy (set once it ended)."
    )


class PlannedChange(Strict):
    """What the planner decided for the next launch; it becomes that attempt's record."""

    strategy: str
    reason: str
    changes: dict[str, list[Any]] = Field(default_factory=dict)
    continue_job: JobName | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="A held probe's job the next run continues instead of launching anew.",
    )


class ProbeCandidate(Strict):
    """A candidate fix the policy wants tried briefly before the full relaunch."""

    strategy: str
    reason: str
    changes: dict[str, list[Any]] = Field(default_factory=dict)
    run_spec: RunSpec = Field(description="The spec the probe (and, if best, the run) uses.")


class PolicyStep(Strict):
    """One rung of a policy written as configuration."""

    strategy: str = Field(description="Registered strategy name.")
    max_times: int = Field(1, gt=0, description="Launches this strategy may produce in a run.")


class History(Strict):
    num_retraining: int = Field(0, ge=0, description="Launches so far, the first included.")
    num_warmup_adjustments: int = Field(0, ge=0)
    num_batch_layer_adjustments: int = Field(0, ge=0)
    num_learning_rate_adjustments: int = Field(0, ge=0)
    num_monitor_transitions: int = Field(0, ge=0)
    latest_job_name: JobName | None = None
    attempts: list[Attempt] = Field(default_factory=list)

    @property
    def runs(self) -> list[Attempt]:
        """The full launches, without the probes."""
        return [a for a in self.attempts if a.kind is AttemptKind.run]

    @property
    def updates_spent(self) -> int:
        """Updates run by every launch and probe, each once: a probe a run went on from
        (Attempt.continues) is in that run's steps_run."""
        continued = {a.continues for a in self.runs if a.continues}
        return sum(
            a.steps_run
            for a in self.attempts
            if not (a.kind is AttemptKind.probe and a.job_name in continued)
        )


class Budgets(Strict):
    max_num_retraining: int = Field(30, gt=0, le=10_000, description="Launches allowed in all.")
    max_monitor_transitions: int = Field(
        200, gt=0, le=1_000_000, description="Monitor calls allowed in all."
    )
    probe_steps: int = Field(
        25,  # the ranking of benchmarks/repair_quality.py's 22 cases at 25 is theirs at 50
        ge=0,
        le=100_000,
        description="Updates each probe runs before it is judged: the adaptive policy may "
        "try a few candidate learning rates this long, side by side, before a full "
        "relaunch (0: no probes).",
    )
    max_num_probes: int = Field(
        12, ge=0, le=1_000, description="Probes allowed in all (they are launches too)."
    )


# The policy of a run that names none: adaptive wins on compute and is never worse on
# quality on every scenario of benchmarks/policy_comparison.py (README, "Policies").
DEFAULT_POLICY = "adaptive"


class State(Strict):
    # Field order is the order of the Prefect UI's run form and of state.json: first what
    # a user sets to start a run, then what the flow keeps up to date.
    run_spec: RunSpec = Field(default_factory=RunSpec)
    budgets: Budgets = Field(default_factory=Budgets)
    policy: str = Field(DEFAULT_POLICY, description="Name of the remediation policy.")
    policy_config: dict[str, list[PolicyStep]] | None = Field(
        None,
        description="Finding -> ordered strategies with limits; used by policy 'config' "
        "(and by 'adaptive' in place of its own order for the findings it names). "
        "A string is a JSON file path, read when the payload is loaded.",
    )
    history: History = Field(default_factory=History)
    next_action: NextAction = NextAction.launch_new
    job_status: JobStatus | None = None
    rule_status: RuleStatus | None = None
    findings: list[Finding] = Field(
        default_factory=list, description="Findings of the latest job, for the planner."
    )
    planned_change: PlannedChange | None = Field(
        None, description="The strategy the next launch applies (set by plan, used by train)."
    )
    probes: list[ProbeCandidate] = Field(
        default_factory=list,
        description="Candidate fixes to try briefly before the next launch (set by plan, "
        "used by probe, which picks the best as planned_change).",
    )
    end_reason: str | None = Field(None, description="Why next_action became end.")

    @field_validator("policy_config", mode="before")
    @classmethod
    def _policy_config_from_file(cls, value: Any) -> Any:
        # A path is read once, when the payload is loaded; the payload then carries the
        # content, so the flow stays a pure function of it.
        if not isinstance(value, str):
            return value
        try:
            return json.loads(Path(value).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"policy_config file {value!r}: {exc}") from exc

    @property
    def current_attempt(self) -> Attempt | None:
        """The latest full launch (probes are tried beside it, never instead of it)."""
        runs = self.history.runs
        return runs[-1] if runs else None


class Payload(Strict):
    """The document that travels between steps: {"state": {...}}."""

    state: State

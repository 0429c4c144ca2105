"""The NaN guard's policy, one for every job: what a bad update leads to, and what it says.

Every job's guard (the built-in job's, training/guard.py; the launcher's, for any script,
training/script_guard.py) checks each update before it is applied: the loss and the total
gradient norm (summed in float64, so finite exactly when every gradient is) must be finite.
The job decides whether an update is bad (`finite`, and what it alone knows: a GradScaler's
calibration is not bad) and keeps it from being applied; `NanGuardPolicy.record_bad` does
the rest, the same for every job, by the mode (REMEDY_NAN_GUARD, run_spec `nan_guard`):
  - "stop": rule status NonFiniteGradient IssuesFound is written, and the stop file is
    created as a StopTraining action does (the backend and the rule evaluator stop with the
    job); record_bad returns True and the job stops ("Stopped");
  - "skip": a NoIssuesFound status counts the bad updates (a final word at once: a job that
    dies later leaves no rule pending) and training goes on; the MAX_SKIPPED_UPDATES-th bad
    update stops the job as "stop" does. `close` at the end of the run says the run ended
    with those updates skipped;
  - "off": no check (the job does not call the policy).
The status is the rule evaluator's record (debugger/status.py) plus the guard's own keys
(write_rule_status): bad_batches, and what only the built-in job knows (bundle,
localisation, suspect_samples, suspect_shards, data_problem; empty for a script). Its text:
"N non-finite update(s), latest at step S: <what>; <action>; <the job's notes>".
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remedy.debugger import store
from remedy.debugger.modes import ModeKeys
from remedy.debugger.status import RuleStatus, RuleStatusRecord, status_path
from remedy.state_schema.job_env import STOP_FILE_ENV
from remedy.training.environment import NanGuardMode

RULE_NAME = "NonFiniteGradient"
MAX_SKIPPED_UPDATES = 20  # "skip" gives up after this many: the run is not training any more

STOPPED = "update not applied, job stopped"
STOPPED_AFTER = "update applied (read one update late), job stopped before the next"
GOING_ON = "update skipped, training goes on (nan_guard skip)"
ENDED = "run ended, those updates skipped (nan_guard skip)"


def finite(loss: float | None, grad_norm: float | None) -> bool:
    """An update passes when its loss and gradient norm are finite (None: not known, passes)."""
    return all(value is None or math.isfinite(value) for value in (loss, grad_norm))


@dataclass(frozen=True)
class Evidence:
    """What a job knows of a bad update beyond its step, for the status it is reported in."""

    what: str = ""  # what was not finite, e.g. "loss nan"
    notes: tuple[str, ...] = ()  # more for the text: where its repro bundle is, ...
    keys: Mapping[str, Any] = field(default_factory=dict)  # write_rule_status's keywords


class NanGuardPolicy:
    """A job's NaN guard: counts its bad updates, writes the status, stops when due."""

    def __init__(
        self, mode: NanGuardMode, status_dir: Path | None, worker: str | None = None
    ) -> None:
        """`status_dir`: None writes no status; `worker`: this process's name in a job of
        several (the status text begins with it)."""
        self.mode = mode
        self.status_dir = status_dir
        self.worker = worker
        self.bad_updates = 0
        self.first_bad_step: int | None = None
        self.latest_bad_step: int | None = None
        self.stopped = False  # by a bad update: the job ends
        self.latest = Evidence()  # the latest bad update's

    def record_bad(
        self, step: int, evidence: Evidence | None = None, applied: bool = False
    ) -> bool:
        """A bad update at `step`, which the job does not apply (`applied`: it was, read one
        update late on a device): the status is written and, when the guard stops ("stop",
        or the MAX_SKIPPED_UPDATES-th in "skip"), the stop requested. True: the job must
        stop; False: it goes on."""
        evidence = evidence or Evidence()
        self.bad_updates += 1
        if self.first_bad_step is None:
            self.first_bad_step = step
        self.latest_bad_step, self.latest = step, evidence
        self.stopped = self.mode == "stop" or self.bad_updates >= MAX_SKIPPED_UPDATES
        if self.stopped:
            action = STOPPED_AFTER if applied else STOPPED
            self._report(RuleStatus.ISSUES_FOUND, action, evidence, steps_evaluated=step)
            request_stop()
        else:  # a final word at once: a job that dies later must not leave a rule pending
            self._report(RuleStatus.NO_ISSUES_FOUND, GOING_ON, evidence, steps_evaluated=step)
        return self.stopped

    def close(self, steps: int) -> None:
        """At the end of the run, after `steps` updates: when it skipped bad updates and was
        not stopped for them, its final word says so (NoIssuesFound)."""
        if self.bad_updates and not self.stopped:
            evidence = self._closing_evidence()
            self._report(RuleStatus.NO_ISSUES_FOUND, ENDED, evidence, steps_evaluated=steps)

    def _closing_evidence(self) -> Evidence:
        """What the closing status reports: the latest bad update's, unless a job knows better."""
        return self.latest

    def _report(
        self, status: RuleStatus, action: str, evidence: Evidence, *, steps_evaluated: int
    ) -> None:
        assert self.latest_bad_step is not None
        text = f"{self.bad_updates} non-finite update(s), latest at step {self.latest_bad_step}"
        text += f": {evidence.what}; {action}" if evidence.what else f": {action}"
        text = "; ".join([text, *evidence.notes])
        if self.worker is not None:
            text = f"{self.worker}: {text}"
        if self.status_dir is not None:
            self._write_status(status, text, evidence, steps_evaluated)
        print(f"nan guard: {text}", flush=True)

    def _write_status(
        self, status: RuleStatus, text: str, evidence: Evidence, steps_evaluated: int
    ) -> None:
        assert self.status_dir is not None and self.latest_bad_step is not None
        write_rule_status(
            self.status_dir,
            status,
            self.latest_bad_step,
            text,
            bad_batches=self.bad_updates,
            steps_evaluated=steps_evaluated,
            **evidence.keys,
        )


def write_rule_status(
    folder: Path,
    status: RuleStatus,
    step: int,
    details: str,
    *,
    bundle: str | None = None,
    localisation: Any = None,
    suspect_samples: list[int] | None = None,
    suspect_shards: list[Any] | None = None,
    bad_batches: int = 1,
    data_problem: dict[str, Any] | None = None,
    steps_evaluated: int | None = None,
) -> Path:
    """The guard's finding as rule status NonFiniteGradient.json in `folder`: the rule
    evaluator's shape (debugger.status) plus the guard's own keys. Returns its path.
    `step`: the (latest) bad update's; `steps_evaluated`: the updates checked (default step)."""
    record = RuleStatusRecord(
        name=RULE_NAME,
        rule=RULE_NAME,
        status=status,
        details=details,
        step=step,
        mode=ModeKeys.TRAIN,
        steps_evaluated=step if steps_evaluated is None else steps_evaluated,
        last_modified=store.utc_now_iso(),
    )
    path = status_path(folder, RULE_NAME)  # the evaluator's shape
    extra = {
        "bundle": bundle,
        "localisation": localisation,
        "suspect_samples": suspect_samples or [],
        "suspect_shards": suspect_shards or [],
        "bad_batches": bad_batches,
        "data_problem": data_problem,
    }
    store.write_json(path, record.to_json() | extra)
    return path


def request_stop(requested_by: str = "nan_guard") -> None:
    """Create $REMEDY_STOP_FILE (when set) as a StopTraining action does: the backend and
    the rule evaluator, which watch it, stop with the job."""
    stop_file = os.environ.get(STOP_FILE_ENV)
    if stop_file and not Path(stop_file).exists():
        request = {"requested_by": requested_by, "time": datetime.now(UTC).isoformat()}
        store.write_json(stop_file, request)

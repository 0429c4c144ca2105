"""What remedy asks the Slurm controller, through Slurm's own commands: sbatch, scontrol,
squeue, sacct (only where accounting is on) and scancel. They run with the flow's
environment (SLURM_CONF and the like choose the cluster)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

COMMAND_TIMEOUT_S = 60.0
FIELD = re.compile(r"(?:^|\s)([A-Za-z/:]+)=(\S*)")
# Slurm's final job states (the base states; COMPLETING and the like are not final).
FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE"}
)  # fmt: skip
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"})


# What Slurm's commands say when the controller cannot be reached (worth a retry).
UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused")


class SlurmError(RuntimeError):
    """A Slurm command failed (e.g. a refused submission)."""


class SlurmUnreachable(SlurmError, ConnectionError):
    """The controller did not answer: an outage, which the flow's tasks retry."""


def failure(command: list[str], said: str) -> SlurmError:
    kind = SlurmUnreachable if any(word in said for word in UNREACHABLE) else SlurmError
    return kind(f"{' '.join(command[:3])}: {said.strip()}")


@dataclass(frozen=True)
class SlurmJob:
    """One job as the controller (or accounting) describes it."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, TIMEOUT, ...
    reason: str | None  # why it is pending (Resources, Priority, ...), or why it ended
    submitted: datetime | None
    started: datetime | None
    ended: datetime | None
    exit_code: str | None  # "code:signal" of the batch script
    restarts: int = 0  # how many times Slurm requeued it (its SLURM_RESTART_COUNT)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def is_pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def pending_hint(self) -> str | None:
        """What ends a wait that no scheduling will end by itself, for the person watching."""
        reason = (self.reason or "").lower()
        if "held" in reason:  # JobHeldAdmin, JobHeldUser, launch_failed_requeued_held
            return f"held until released: `scontrol release {self.job_id}`"
        if reason == "begintime" and self.restarts:  # Slurm's back-off for a requeued job
            return (
                "Slurm holds a requeued job back about two minutes; `scontrol update "
                f"JobId={self.job_id} StartTime=now` starts it at once"
            )
        return None

    @property
    def queue_wait_s(self) -> float | None:
        if self.submitted is None or self.started is None:
            return None
        return max(0.0, (self.started - self.submitted).total_seconds())


def run(
    command: list[str], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
            env=dict(os.environ if env is None else env),
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise SlurmError(
            f"{command[0]}: not found; the slurm backend needs Slurm's commands on the PATH "
            "of the machine running the flow (a login node of the cluster)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmUnreachable(
            f"{' '.join(command[:2])}: no answer in {COMMAND_TIMEOUT_S:g} s"
        ) from None


def slurm_time(value: str | None) -> datetime | None:
    """Slurm's times are the controller's local time, without a zone."""
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(value).astimezone()
    except ValueError:
        return None


def submit(script: Path, env: Mapping[str, str]) -> str:
    """sbatch the batch script with env (the job's environment: sbatch exports it); the
    new job's id."""
    command = ["sbatch", "--parsable", str(script)]
    done = run(command, env)
    if done.returncode != 0:
        raise failure(command, done.stderr or done.stdout)
    return done.stdout.strip().split(";")[0]  # "ID" or "ID;cluster"


def job_ids_named(name: str) -> list[str]:
    """Ids of the jobs the controller knows with this job name (pending, running, or ended
    lately): how a launch interrupted between sbatch and writing the id finds its job."""
    command = ["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i"]
    done = run(command)
    if done.returncode != 0:
        raise failure(command, done.stderr)
    return done.stdout.split()


def job(job_id: str) -> SlurmJob | None:
    """The job from the controller (`scontrol show job`), else from accounting (`sacct`,
    where it is on); None when neither knows it (ended before the controller's MinJobAge
    and no accounting)."""
    command = ["scontrol", "show", "job", "--oneliner", job_id]
    done = run(command)
    if done.returncode == 0 and done.stdout.strip():
        fields = dict(FIELD.findall(done.stdout))
        state = fields.get("JobState", "UNKNOWN")
        reason = fields.get("Reason")
        return SlurmJob(
            job_id=job_id,
            state=state,
            reason=None if reason in (None, "None") else reason,
            submitted=slurm_time(fields.get("SubmitTime")),
            started=slurm_time(fields.get("StartTime")) if state not in PENDING_STATES else None,
            ended=slurm_time(fields.get("EndTime")) if state in FINAL_STATES else None,
            exit_code=fields.get("ExitCode"),
            restarts=int(fields.get("Restarts") or 0),
        )
    if "Invalid job id" not in done.stderr:
        raise failure(command, done.stderr)
    return accounted_job(job_id)


def accounted_job(job_id: str) -> SlurmJob | None:
    """The job from Slurm's accounting; None where accounting is off or does not know it."""
    try:
        done = run(
            ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}",
             "--format=State,Reason,Submit,Start,End,ExitCode"]
        )  # fmt: skip
    except SlurmError:
        return None
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    if not lines:
        return None
    state, reason, submitted, started, ended, exit_code = (lines[0].split("|") + [""] * 6)[:6]
    return SlurmJob(
        job_id=job_id,
        state=state.split()[0],  # "CANCELLED by 0"
        reason=None if reason in ("", "None") else reason,
        submitted=slurm_time(submitted),
        started=slurm_time(started),
        ended=slurm_time(ended),
        exit_code=exit_code or None,
    )


def cancel(job_id: str, signal_name: str | None = None) -> None:
    """scancel the job (Slurm: SIGTERM, then SIGKILL after the cluster's KillWait); with
    signal_name, send only that signal to every process of the job."""
    command = ["scancel", job_id]
    if signal_name is not None:
        command = ["scancel", "--full", f"--signal={signal_name}", job_id]
    done = run(command)
    if done.returncode != 0 and "already completing or completed" not in done.stderr:
        raise failure(command, done.stderr)

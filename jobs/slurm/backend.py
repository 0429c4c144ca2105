"""Slurm job backend: each attempt is a batch job submitted with sbatch.

The job's folder is the local backend's (layout.py): under the run folder, or under
run_spec.slurm.shared_dir, on a filesystem every node sees. launch() writes it as the local
backend does, then a batch script (batch_script.py) that runs the local supervisor inside
the allocation: the training process, the rule evaluator beside it (reading the store
where it is written, so a rule stops the job even while the flow is down) and the stop
escalation are the local backend's. What Slurm adds is read from its controller
(controller.py): the job id, PENDING and why, and the ends only Slurm sees (TIMEOUT,
NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, a scancel from outside).

run_dir/jobs/<job>/slurm.json keeps the job's folder and its Slurm job id: written before
sbatch (the folder) and right after (the id), so a flow that resumes adopts the job it
submitted and never submits it twice.

Slurm may requeue a running job (preemption, a failed node, `scontrol requeue`): the same
job id runs its batch script again, which warm-starts it from its last checkpoint
(requeue.py); the flow keeps watching the one job, whose snapshot counts the requeues.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remedy.jobs.base import FINAL_JOB_STATUSES
from remedy.jobs.local.backend import SUPERVISOR_END_S, LocalBackend
from remedy.jobs.local.launch_record import LaunchRecord
from remedy.jobs.local.layout import JobPaths, error_line, read_json, write_request
from remedy.jobs.registry import register_backend
from remedy.jobs.slurm import controller
from remedy.jobs.slurm.batch_script import OUTPUT_FILE, allocation_command, batch_script, slurm_of
from remedy.jobs.slurm.checks import SlurmSpecError, check_slurm_spec
from remedy.jobs.slurm.controller import SlurmError, SlurmJob
from remedy.jobs.slurm.requeue import RUN_SPEC_FILE, prepared_restart
from remedy.state_schema import JobStatus, RunSpec, write_atomic
from remedy.state_schema.job_env import without_secrets
from remedy.state_schema.slurm_spec import SlurmSpec

SUBMIT_TIMEOUT_S = 60.0  # a job folder without a Slurm job by then was never submitted
POLL_S = 0.5  # how often stop() asks the controller
SCANCEL_KILL_WAIT_S = 30.0  # after a forced scancel, time for Slurm to end the job
NEVER_SUBMITTED = "InternalServerError: the job was never submitted to Slurm"
# Ends only Slurm sees: (job status, failure reason); {id} is the Slurm job id. A reason
# starting with InternalServerError or CapacityError is relaunched unchanged (jobs/base.py).
SLURM_ENDS: dict[str, tuple[JobStatus, str]] = {
    "TIMEOUT": (
        JobStatus.Failed,
        "ClientError: Slurm job {id} reached its time limit (TIMEOUT; run_spec.slurm.time_limit)",
    ),
    "NODE_FAIL": (
        JobStatus.Failed,
        "InternalServerError: Slurm job {id} ended NODE_FAIL: a node of its allocation failed",
    ),
    "BOOT_FAIL": (
        JobStatus.Failed,
        "InternalServerError: Slurm job {id} ended BOOT_FAIL: a node failed to boot",
    ),
    "PREEMPTED": (
        JobStatus.Failed,
        "CapacityError: Slurm job {id} was PREEMPTED (its nodes went to another job)",
    ),
    "OUT_OF_MEMORY": (
        JobStatus.Failed,
        "ClientError: Slurm job {id} ran OUT_OF_MEMORY (run_spec.slurm.mem_per_task)",
    ),
    "DEADLINE": (JobStatus.Failed, "ClientError: Slurm job {id} reached its deadline (DEADLINE)"),
    "CANCELLED": (
        JobStatus.Stopped,
        "Slurm job {id} was cancelled outside remedy (scancel, or an administrator)",
    ),
}


def age_s(created: str) -> float:
    return (datetime.now(UTC) - datetime.fromisoformat(created)).total_seconds()


@register_backend
class SlurmBackend(LocalBackend):
    name = "slurm"
    options = SlurmSpec

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)  # the same launcher and command line
        check_slurm_spec(spec)

    def room_beside(self, spec: RunSpec, others: int) -> bool:
        """A job on no GPU: a cluster has CPUs for a few more. One with GPUs is not held:
        its allocation waiting may leave the probes queued behind it, which nothing here
        can see."""
        return not slurm_of(spec).gpus_per_node

    @classmethod
    def check_gpus(cls, spec: RunSpec) -> None:
        """None here: a job's GPUs are its allocation's (slurm.gpus_per_node), not this
        machine's; check_slurm_spec refuses run_spec.local.gpus_per_job."""

    # --- where a job's files are -----------------------------------------------------
    def pointer(self, job_name: str) -> Path:
        """slurm.json in the run folder: the job's folder and its Slurm job id."""
        return self.run_dir / "jobs" / job_name / "slurm.json"

    def paths(self, job_name: str) -> JobPaths:
        where = (read_json(self.pointer(job_name)) or {}).get("job_dir")
        return JobPaths(Path(where) if where else self.run_dir / "jobs" / job_name)

    def job_dir(self, job_name: str, spec: RunSpec) -> Path:
        shared = slurm_of(spec).shared_dir
        if shared is None:
            return self.run_dir / "jobs" / job_name
        return Path(shared) / self.run_dir.name / job_name

    def job_id(self, job_name: str) -> str | None:
        """The job's Slurm id: recorded at submission, else found by its name (a launch
        that ended between sbatch and recording it), and then recorded."""
        pointer = read_json(self.pointer(job_name)) or {}
        if pointer.get("job_id"):
            return str(pointer["job_id"])
        if not self.paths(job_name).job.exists():
            return None  # not submitted yet
        found = controller.job_ids_named(job_name)
        if not found:
            return None
        write_atomic(self.pointer(job_name), json.dumps(pointer | {"job_id": found[-1]}))
        return found[-1]

    # --- launch ----------------------------------------------------------------------
    def exists(self, job_name: str) -> bool:
        return self.paths(job_name).job.exists()

    def launch(self, job_name: str, spec: RunSpec) -> None:
        """Write the job's folder and batch script, then sbatch it; a job that was
        submitted already (its id recorded or found by name) is never submitted again."""
        try:
            check_slurm_spec(spec)
        except SlurmSpecError as error:
            raise ValueError(str(error)) from None
        pointer = self.pointer(job_name)
        if not pointer.exists():
            pointer.parent.mkdir(parents=True, exist_ok=True)
            job_dir = self.job_dir(job_name, spec)
            write_atomic(pointer, json.dumps({"job_dir": str(job_dir), "job_id": None}))
        if self.job_id(job_name) is not None:
            return
        paths = self.paths(job_name)
        if not paths.job.exists():
            paths.root.mkdir(parents=True, exist_ok=True)
            write_atomic(paths.root / RUN_SPEC_FILE, spec.model_dump_json())  # for a requeue
            self.write_job(job_name, spec, paths)
        script = paths.root / "job.sbatch"
        write_atomic(script, batch_script(job_name, spec, paths))
        env = without_secrets(os.environ)  # sbatch passes it on to the job
        job_id = controller.submit(script, env)
        write_atomic(pointer, json.dumps({"job_dir": str(paths.root), "job_id": job_id}))

    def launch_record(self, job_name: str, spec: RunSpec, paths: JobPaths) -> LaunchRecord:
        """The local record, but GPUs and processes are the allocation's, not this
        machine's: run_spec.slurm.gpus_per_node, torchrun per node, srun across nodes."""
        record = super().launch_record(job_name, spec, paths)
        return record.model_copy(
            update={
                "gpus_per_job": slurm_of(spec).gpus_per_node or 0,
                "command": allocation_command(spec, paths, record.command),
            }
        )

    # --- watch -----------------------------------------------------------------------
    def whereabouts(
        self, paths: JobPaths, record: LaunchRecord, status: dict[str, Any], result: dict
    ) -> dict[str, Any]:
        """The supervisor's word (status.json) where it has the last one, Slurm's where
        only Slurm knows: the queue, and ends that killed the supervisor or came from
        outside (a final status of Stopped that no stop request asked for)."""
        job_name = record.job_name
        job_id = self.job_id(job_name)
        slurm = controller.job(job_id) if job_id else None
        stopping = paths.stop_request.exists()
        requeued = slurm.restarts if slurm else prepared_restart(paths)
        if slurm is not None and slurm.restarts > prepared_restart(paths):
            status = {}  # the run Slurm ended and requeued wrote it; the next has not begun
        said = JobStatus(status.get("TrainingJobStatus", "InProgress"))
        where: dict[str, Any] = {
            "status": said,
            "failure_reason": status.get("FailureReason"),
            "secondary_status": status.get("SecondaryStatus"),
            "status_message": status.get("StatusMessage"),
            "created": (slurm and slurm.submitted) or record.created,
            "started": status.get("TrainingStartTime") or (slurm and slurm.started),
            "ended": status.get("TrainingEndTime") or (slurm and slurm.ended),
            "backend_job_id": job_id,
            "queue_wait_s": slurm.queue_wait_s if slurm else None,
            "requeues": requeued,
        }
        if job_id is None:
            if age_s(record.created) > SUBMIT_TIMEOUT_S:
                return where | {"status": JobStatus.Failed, "failure_reason": NEVER_SUBMITTED}
            return where | {"status": JobStatus.InProgress, "status_message": "submitting"}
        if said is JobStatus.Completed or (said is JobStatus.Stopped and stopping):
            return where
        if slurm is None:  # the controller has forgotten it (MinJobAge), no accounting
            if said is JobStatus.Stopped:  # by a signal nobody here asked for
                reason = f"Slurm job {job_id} was stopped from outside remedy (Slurm no "
                return where | {"failure_reason": reason + "longer knows by what)"}
            if said in FINAL_JOB_STATUSES:
                return where
            return where | {
                "status": JobStatus.Failed,
                "failure_reason": f"InternalServerError: Slurm no longer knows job {job_id}, "
                "and its supervisor wrote no final status",
            }
        if slurm.is_final:
            return where | self.slurm_end(slurm, said, stopping, paths)
        if said in FINAL_JOB_STATUSES and said is not JobStatus.Stopped:
            return where  # the supervisor's end (e.g. the training code failed)
        # Running or queued; a Stopped that nobody asked for waits for Slurm's reason.
        where["status"] = JobStatus.Stopping if stopping or said is JobStatus.Stopped else said
        if slurm.is_pending:
            wait = (datetime.now(UTC) - slurm.submitted).total_seconds() if slurm.submitted else 0
            where["secondary_status"] = "Pending"
            where["status_message"] = (
                f"pending in Slurm's queue ({slurm.reason or slurm.state}), job {job_id}, "
                f"waiting {wait:.0f} s"
            )
            if slurm.pending_hint:
                where["status_message"] += f"; {slurm.pending_hint}"
        elif not status:
            where["status_message"] = f"Slurm job {job_id} {slurm.state.lower()}, starting"
        if requeued and not status:
            where["status_message"] += (
                f"; requeued by Slurm ({requeued}x): it goes on from its last checkpoint"
            )
        return where

    def slurm_end(
        self, slurm: SlurmJob, said: JobStatus, stopping: bool, paths: JobPaths
    ) -> dict[str, Any]:
        """Status and reason of a job Slurm has ended, where the supervisor's word is not
        the last one (it was killed, or its Stopped came from Slurm's signal)."""
        if slurm.state == "CANCELLED" and stopping:
            return {"status": JobStatus.Stopped, "failure_reason": None}
        if slurm.state in SLURM_ENDS:
            job_status, reason = SLURM_ENDS[slurm.state]
            return {"status": job_status, "failure_reason": reason.format(id=slurm.job_id)}
        if said in FINAL_JOB_STATUSES:
            return {}  # the supervisor ended it itself (e.g. Failed: the code raised)
        output = paths.logs / OUTPUT_FILE.replace("%j", slurm.job_id)
        return {
            "status": JobStatus.Failed,
            "failure_reason": f"ClientError: Slurm job {slurm.job_id} ended {slurm.state} "
            f"(exit {slurm.exit_code}) before its supervisor reported an end: "
            f"{error_line(output)}",
        }

    # --- stop ------------------------------------------------------------------------
    def stop(self, job_name: str) -> None:
        """The stop file (the supervisor ends the job after its current step), then, after
        run_spec.stop_grace_s, scancel (Slurm's SIGTERM, SIGKILL after its KillWait). A
        job still queued is cancelled at once."""
        snapshot = self.describe(job_name)
        if snapshot.is_final:
            return
        paths = self.paths(job_name)
        write_request(paths.stop_request)
        record = self.launched(job_name, paths)
        queued = snapshot.secondary_status == "Pending"
        if not queued and self.wait_final(job_name, record.stop_grace_s):
            return
        job_id = self.job_id(job_name)
        if job_id is None:
            return  # never submitted: describe() says so once SUBMIT_TIMEOUT_S has passed
        controller.cancel(job_id)
        if self.wait_final(job_name, record.kill_after_s + SUPERVISOR_END_S):
            return
        controller.cancel(job_id, "KILL")
        if not self.wait_final(job_name, SCANCEL_KILL_WAIT_S):
            raise SlurmError(f"Slurm job {job_id} ({job_name}) did not end after scancel")

    def wait_final(self, job_name: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.describe(job_name).is_final:
                return True
            time.sleep(POLL_S)
        return False

    # --- logs ------------------------------------------------------------------------
    def logs(self, job_name: str, tail: int = 50) -> str:
        """The job's Slurm output file (the batch script's and supervisor's words, Slurm's
        own such as CANCELLED DUE TO TIME LIMIT), then its training log."""
        paths = self.paths(job_name)
        job_id = self.job_id(job_name)
        files = [paths.logs / OUTPUT_FILE.replace("%j", job_id)] if job_id else []
        parts = []
        for path in [*files, paths.training_log]:
            if path.exists():
                with path.open(errors="replace") as handle:
                    parts.append(f"==> {path} <==\n" + "".join(deque(handle, maxlen=tail)))
        return "\n".join(parts)

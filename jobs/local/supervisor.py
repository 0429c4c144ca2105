"""Runs one local job: the training process and the rule evaluator beside it.

    python -m remedy.jobs.local.supervisor JOB_DIR

It is started detached by the local backend, so a job outlives a crashed flow and a
resumed flow can keep monitoring it. It is the only writer of status.json: the job's
status is final only once the training process has exited AND the evaluator has judged
every step it wrote, so a monitor never sees "Completed" before the rules have spoken.

The training process is the command, working directory and environment the backend wrote
into job.json (remedy.jobs.local.environment), started with the supervisor's environment
less its secrets. A stop request escalates as escalation.py says, whoever made it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from remedy.debugger.evaluator import (
    BUSY_POLL_INTERVAL,
    evaluator_command,
    wait_while_judging,
    write_errors,
)
from remedy.debugger.status import read_statuses
from remedy.debugger.store import has_ended
from remedy.jobs.local.capped_log import CappedLog
from remedy.jobs.local.escalation import Escalation
from remedy.jobs.local.gpus import (
    CUDA_VISIBLE_DEVICES,
    GpuLease,
    GpuSettingError,
    gpus_wanted,
    jobs_per_gpu,
    lock_dir,
    try_lease,
    visible_devices,
)
from remedy.jobs.local.launch_record import LaunchRecord, LaunchRecordError
from remedy.jobs.local.layout import JobPaths, error_line, read_json, read_json_written_by_job
from remedy.jobs.local.log_metrics import LogMetrics
from remedy.jobs.local.process_tree import become_subreaper, end_descendants
from remedy.jobs.local.progress_watch import ProgressWatch, floor_s
from remedy.state_schema import write_atomic
from remedy.state_schema.job_env import LAUNCHER_LOG_PREFIX, without_secrets

# After a clean end the evaluator judges the last steps for as long as it goes on judging,
# and is stopped once this long passes without a word from it.
EVALUATOR_DRAIN_S = 120.0
EVALUATOR_KILL_S = 30.0
LOG_DRAIN_S = 30.0  # once its processes are gone, time to copy the job's last output
POLL_S = 0.1  # how often the training process and the stop file are looked at
GPU_POLL_S = 1.0  # how often a job waiting for a GPU tries again
HEALTH_EVERY_S = 1.0  # how often a training job's evaluator and progress are checked


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


class Supervisor:
    def __init__(self, job_dir: Path) -> None:
        self.paths = JobPaths(job_dir)
        record = LaunchRecord.read(self.paths.job)
        if record is None:
            raise LaunchRecordError(f"{self.paths.job}: no launch record")
        self.record = record
        self.status: dict[str, Any] = {
            "TrainingJobName": record.job_name,
            "TrainingJobStatus": "InProgress",
            "SecondaryStatus": "Starting",
            "CreationTime": record.created,
            "supervisor_pid": os.getpid(),
        }
        self.stop_signalled = False
        self.trainer: subprocess.Popen[bytes] | None = None
        self.evaluator: subprocess.Popen[bytes] | None = None
        self.training_log: CappedLog | None = None
        self.gpus: GpuLease | None = None
        self.failure: str | None = None  # why the supervisor ended the job itself
        self.trainer_started = time.time()
        self.progress = ProgressWatch(self.trainer_started, None, adaptive=False, floor=0.0)
        self.next_health_check = 0.0
        self.job_devices: str | None = None  # CUDA_VISIBLE_DEVICES for the training process
        self.escalation = Escalation(grace_s=record.stop_grace_s, kill_after_s=record.kill_after_s)
        self.log_metrics = LogMetrics(
            record.metric_definitions,
            log=self.paths.training_log,
            out=self.paths.log_metrics,
            progress=self.paths.progress,
        )

    def write_status(self, **fields: Any) -> None:
        self.status.update(fields)
        try:
            write_atomic(self.paths.status, json.dumps(self.status, indent=2) + "\n")
        except OSError as error:  # a full disk: the job must still be ended, not orphaned
            print(f"supervisor: cannot write {self.paths.status}: {error}", file=sys.stderr)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # Someone stops the whole job: the training process gets SIGTERM without a grace.
        self.stop_signalled = True

    @property
    def stop_requested(self) -> bool:
        return self.stop_signalled or self.paths.stop_request.exists()

    def start_trainer(self) -> subprocess.Popen[bytes]:
        env = without_secrets(os.environ) | self.record.env
        if self.job_devices is not None:
            env[CUDA_VISIBLE_DEVICES] = self.job_devices
        read_end, write_end = os.pipe()  # capped_log.py copies it into training.log
        try:
            trainer = subprocess.Popen(
                self.record.command,
                cwd=self.record.cwd,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except OSError:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self.training_log = CappedLog(read_end, self.paths.training_log)
        return trainer

    def wait_trainer(self, trainer: subprocess.Popen[bytes]) -> int:
        """Its exit code; once a stop is requested: SIGTERM after the grace, then SIGKILL."""
        while (code := trainer.poll()) is None:
            if self.stop_requested:
                due = self.escalation.signal_due(time.monotonic(), urgent=self.stop_signalled)
                if due is not None:
                    with contextlib.suppress(ProcessLookupError):  # it has just ended
                        trainer.send_signal(due)
            self.log_metrics.scan()
            if time.monotonic() >= self.next_health_check:
                self.next_health_check = time.monotonic() + HEALTH_EVERY_S
                self.check_health(trainer)
            time.sleep(POLL_S)
        return code

    def check_health(self, trainer: subprocess.Popen[bytes]) -> None:
        """A job that nothing judges any more, or that makes no progress, is ended now
        (SIGTERM, then SIGKILL) and fails with the reason, instead of hanging."""
        if self.failure is not None:
            return
        why = self.evaluator_gone() or self.stalled(trainer)
        if why is None:
            return
        self.failure = f"InternalServerError: {why}"
        self.stop_signalled = True  # urgent: SIGTERM now, SIGKILL kill_after_s later
        with contextlib.suppress(ProcessLookupError):
            trainer.send_signal(signal.SIGCONT)  # a stopped (SIGSTOP) process must run to end

    def pending_rules(self) -> list[str]:
        """Configured rules without a final status."""
        statuses = read_statuses(self.paths.rule_status)
        names = [rule["name"] for rule in read_json(self.paths.rules) or []]
        return [n for n in names if n not in statuses or not statuses[n].status.is_final]

    def evaluator_gone(self) -> str | None:
        """Why the rules can no longer be judged: the evaluator exited with rules pending
        (their statuses become Error, saying so). None while it runs or had judged all."""
        if self.evaluator is None or (code := self.evaluator.poll()) is None:
            return None
        pending = self.pending_rules()
        if not pending:
            return None
        said = error_line(self.paths.evaluator_log)
        how = f"the rule evaluator exited with status {code}: {said}"
        write_errors(self.paths.rule_status, pending, {}, f"{how} (before judging this rule)")
        return f"{how}; unjudged: {', '.join(pending)}"

    def stalled(self, trainer: subprocess.Popen[bytes]) -> str | None:
        """Why the training process looks frozen: neither progress.json, the training log
        nor metrics.jsonl changed for longer than its limit (progress_watch.py: learned
        from its pace, under run_spec.progress_timeout_s). None while it moves."""
        watched = (self.paths.progress, self.paths.training_log, self.paths.metrics)
        times = [path.stat().st_mtime for path in watched if path.exists()]
        if times:
            self.progress.moved(max(times))
        limit = self.progress.limit_s()
        shown = limit if math.isfinite(limit) else None
        if self.status.get("progress_limit_s", "unset") != shown:
            self.write_status(progress_limit_s=shown)  # what "frozen" means for it now
        idle = time.time() - self.progress.last_move
        if idle < limit:
            return None
        return (
            f"no progress for {idle:.0f} s ({self.progress.why()}): "
            f"progress.json and the training log unchanged; the training process is "
            f"{process_state(trainer.pid)}"
        )

    def start_evaluator(self) -> subprocess.Popen[bytes] | None:
        rules = read_json(self.paths.rules) or []
        if not rules:
            return None
        command = evaluator_command(
            str(self.paths.tensors),
            str(self.paths.rules),
            str(self.paths.rule_status),
            str(self.paths.stop_request),
            self.record.evaluator_poll_interval,
            BUSY_POLL_INTERVAL,  # a local store is cheap to list: stop a fast job sooner
        )
        log = self.paths.evaluator_log.open("ab")
        env = without_secrets(os.environ) | {"PYTHONUNBUFFERED": "1"}  # not the job's paths
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def finish_evaluator(self) -> None:
        if self.evaluator is None:
            return
        clean_end = has_ended(self.paths.tensors)  # every worker's end marker, if several
        quiet_s = EVALUATOR_DRAIN_S if clean_end else 0.01
        poll_s = min(POLL_S, quiet_s)
        if wait_while_judging(self.evaluator, self.paths.rule_status, quiet_s, poll_s):
            return
        self.evaluator.terminate()  # it judges what is written, then reports Stopped
        try:
            self.evaluator.wait(timeout=EVALUATOR_KILL_S)
        except subprocess.TimeoutExpired:
            self.evaluator.kill()
            self.evaluator.wait()

    def outcome(self, code: int) -> tuple[str, str | None]:
        """(TrainingJobStatus, FailureReason) from the training process's exit."""
        if self.failure is not None:
            return "Failed", self.failure
        if self.stop_requested:
            return "Stopped", None
        if code == 0:
            result = read_json_written_by_job(self.paths.result) or {}
            return ("Stopped", None) if result.get("status") == "Stopped" else ("Completed", None)
        if code < 0:
            name = signal.Signals(-code).name
            return "Failed", (
                f"InternalServerError: the training process was killed by {name} "
                "(not by a stop request; out of memory or killed by the host?)"
            )
        said = error_line(self.paths.training_log, (LAUNCHER_LOG_PREFIX,))
        return "Failed", f"AlgorithmError: exit code {code}: {said}"

    def lease_gpus(self) -> bool:
        """Hold the job's GPUs (gpus.py), waiting while other jobs hold them. False when the
        job ends first: asked to stop, or a GPU setting it cannot meet (status written)."""
        devices = visible_devices(os.environ)
        try:
            wanted = gpus_wanted(self.record.gpus_per_job, len(devices))
            per_gpu = jobs_per_gpu(os.environ)
        except GpuSettingError as error:
            self.end_before_training("Failed", f"ClientError: {error}")
            return False
        if wanted == 0:
            if devices:  # gpus_per_job 0 on a GPU machine: the job must not see any
                self.job_devices = ""
            return True
        holder = f"pid {os.getpid()} {self.paths.root}"
        folder = lock_dir(os.environ)
        while (lease := try_lease(wanted, devices, per_gpu, folder, holder)) is None:
            if self.stop_requested:
                self.end_before_training("Stopped", None)
                return False
            if "StatusMessage" not in self.status:
                self.write_status(
                    StatusMessage=f"waiting for {wanted} free GPU(s): all of "
                    f"{','.join(devices)} are taken by other jobs ({per_gpu} per GPU; "
                    f"locks in {folder})"
                )
            time.sleep(GPU_POLL_S)
        self.gpus, self.job_devices = lease, lease.cuda_visible_devices
        self.status.pop("StatusMessage", None)
        self.write_status(gpus=lease.devices)
        return True

    def end_before_training(self, job_status: str, reason: str | None) -> None:
        fields: dict[str, Any] = {"TrainingJobStatus": job_status, "SecondaryStatus": job_status}
        if reason:
            fields["FailureReason"] = reason
        self.write_status(**fields, TrainingEndTime=utc_now())

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        become_subreaper()  # what the job forks and abandons stays ours to end
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        self.write_status()
        if not self.lease_gpus():
            return 0
        try:
            self.trainer = self.start_trainer()
        except OSError as error:  # e.g. Argument list too long: the same at every launch
            if self.gpus is not None:
                self.gpus.release()
            self.end_before_training(
                "Failed", f"ClientError: the training process could not start: {error}"
            )
            return 0
        self.trainer_started = time.time()
        self.progress = ProgressWatch(
            self.trainer_started,
            self.record.progress_timeout_s,
            adaptive=self.record.progress_timeout == "adaptive",
            floor=floor_s(),
        )
        self.evaluator = self.start_evaluator()
        self.write_status(
            SecondaryStatus="Training",
            TrainingStartTime=utc_now(),
            training_pid=self.trainer.pid,
            evaluator_pid=self.evaluator.pid if self.evaluator else None,
        )
        code = self.wait_trainer(self.trainer)
        # Whatever the training process left running (forked, setsid'd) ends with it.
        spare = frozenset([self.evaluator.pid]) if self.evaluator else frozenset()
        end_descendants(os.getpid(), spare)
        if self.training_log is not None:  # all of its output, before its end is judged
            self.training_log.join(LOG_DRAIN_S)
        if self.gpus is not None:  # the evaluator needs none: a waiting job may start
            self.gpus.release()
        job_status, reason = self.outcome(code)  # judged now: a later stop file is the rules'
        self.write_status(
            SecondaryStatus="EvaluatingRules", exit_code=code, training_exited_at=utc_now()
        )
        self.log_metrics.finish()  # every metric the job logged, before its end is reported
        self.finish_evaluator()
        end_descendants(os.getpid())  # the evaluator's too
        if self.evaluator is not None and (pending := self.pending_rules()):
            code = self.evaluator.returncode
            write_errors(
                self.paths.rule_status,
                pending,
                {},
                f"the rule evaluator exited with status {code} before judging this rule: "
                f"{error_line(self.paths.evaluator_log)}",
            )
        fields: dict[str, Any] = {"TrainingJobStatus": job_status, "TrainingEndTime": utc_now()}
        fields["SecondaryStatus"] = job_status
        if reason:
            fields["FailureReason"] = reason
        self.write_status(**fields)
        return 0


def process_state(pid: int) -> str:
    """How the kernel sees a process, e.g. 'stopped (T)', from /proc."""
    names = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O wait",
             "T": "stopped", "t": "stopped by a tracer", "Z": "a zombie"}  # fmt: skip
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "gone"
    return f"{names.get(state, 'in state')} ({state})"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m remedy.jobs.local.supervisor JOB_DIR", file=sys.stderr)
        return 2
    job_dir = Path(args[0])
    try:
        supervisor = Supervisor(job_dir)
    except LaunchRecordError as error:
        print(f"{job_dir}: {error} (not a launched job folder)", file=sys.stderr)
        return 2
    return supervisor.run()


if __name__ == "__main__":
    raise SystemExit(main())

"""Local job backend: each job is a detached supervisor process under <run_dir>/jobs/.

launch() writes the job's folder and its launch record (job.json, launch_record.py: the
training command, working directory and environment, environment.py) and starts the
supervisor, which runs the training process and the rule evaluator and escalates a stop
request (escalation.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from remedy.debugger import RULES
from remedy.debugger.capture import capture_config
from remedy.debugger.rule_check import check_rule, rule_file_path
from remedy.debugger.rule_config import RuleConfig
from remedy.debugger.rule_presets import expand_presets
from remedy.jobs.base import (
    FINAL_JOB_STATUSES,
    JobBackend,
    JobNotFound,
    JobSnapshot,
    Progress,
    RuleEvaluation,
    RuleWord,
    read_checkpoint,
)
from remedy.jobs.local.environment import check_argv_limits, job_launch, path_flags
from remedy.jobs.local.escalation import Escalation
from remedy.jobs.local.gpus import gpus_wanted, jobs_per_gpu, visible_devices
from remedy.jobs.local.launch_record import LaunchRecord
from remedy.jobs.local.layout import (
    JobPaths,
    error_line,
    read_json,
    read_json_written_by_job,
    write_request,
)
from remedy.jobs.local.log_metrics import final_values, read_records
from remedy.jobs.local.options import local_of
from remedy.jobs.local.process_tree import descendants, signal_process
from remedy.jobs.registry import register_backend
from remedy.state_schema import Checkpoint, JobStatus, RunSpec, write_atomic
from remedy.state_schema.job_env import CONTINUE_UNTIL_KEY, without_secrets
from remedy.state_schema.local_spec import LocalSpec
from remedy.state_schema.metric_definitions import is_finite

SUPERVISOR_GONE = "InternalServerError: the job's supervisor process disappeared"
START_TIMEOUT_S = 60.0  # a job whose supervisor has not reported by then never started
# After the training process has been killed, time for the supervisor to let the evaluator
# judge what was written and to record the end (supervisor.EVALUATOR_KILL_S and some).
SUPERVISOR_END_S = 40.0
# The final metrics a job's result.json gives under fixed keys (the built-in job, the launcher).
RESULT_METRICS = (
    ("train:loss", "final_train_loss"),
    ("test:loss", "final_loss"),
    ("test:accuracy", "final_accuracy"),
)


def result_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The figures of a job's result.json: RESULT_METRICS, then a script's own "metrics":
    {name: value}. Non-finite values are left out."""
    found = {name: result[key] for name, key in RESULT_METRICS if is_finite(result.get(key))}
    own = result.get("metrics")
    if isinstance(own, dict):
        found |= {name: float(value) for name, value in own.items() if is_finite(value)}
    return found


def rule_configs(spec: RunSpec) -> list[dict[str, Any]]:
    """RULES.json: the run's rules, presets expanded (debugger/rule_presets.py: the file
    names every rule it runs), a custom rule's file as an absolute path (found from
    source_dir, as the preflight found it), since the evaluator runs elsewhere. Raises
    ValueError for a preset the preflight would refuse. A warm-started job's built-in rules
    run with their WARM_START parameters (its store begins with a trained model)."""
    rules = expand_presets([rule.model_dump(mode="json") for rule in spec.rules])
    for rule in rules:
        if rule.get("rule_file"):
            rule["rule_file"] = str(rule_file_path(rule["rule_file"], spec.source_dir))
        elif spec.init_checkpoint and (cls := RULES.get(rule.get("rule", ""))) is not None:
            rule["parameters"] = (rule.get("parameters") or {}) | cls.WARM_START
    return rules


TENSORBOARD_DIR = "tensorboard"


def debugger_config(spec: RunSpec, tensors: Path) -> dict[str, object]:
    """What the job saves, derived from its rules (debugger/capture.py): as the original,
    losses every step and gradients every debugger_save_interval steps, plus what each rule
    reads (activations for DeadRelu, labels and predictions for Confusion, ...). A rule
    that cannot be built (the preflight refuses it) adds nothing; the evaluator reports it."""
    rules = []
    for config in rule_configs(spec):
        with contextlib.suppress(ValueError):
            rules.append(check_rule(RuleConfig.from_dict(config)))
    config = capture_config(rules, str(tensors), spec.debugger_save_interval)
    if local_of(spec).tensorboard:  # beside the store: jobs/JOB/tensorboard
        config["tensorboard_dir"] = str(tensors.parent / TENSORBOARD_DIR)
    return config


def pid_alive(pid: int) -> bool:
    """True while pid runs; reaps it first if it is our exited child (no zombies)."""
    try:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return False  # our child, and it has just been reaped
    except ChildProcessError:
        pass  # not our child (launched by an earlier flow process): ask the kernel
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def supervisor_command(paths: JobPaths) -> list[str]:
    """The job's supervisor (supervisor.py), run by this interpreter."""
    return [sys.executable, "-m", "remedy.jobs.local.supervisor", str(paths.root)]


def place_warm_start(checkpoint: Path, checkpoints: Path) -> None:
    """A script's warm start: the checkpoint folder copied into the new job's checkpoint dir
    (REMEDY_CHECKPOINT_DIR), where the script looks for one to resume from, as the cloud
    service restores its checkpoint folder into a new job."""
    if not checkpoint.is_dir():
        raise FileNotFoundError(f"run_spec.init_checkpoint: no checkpoint folder {checkpoint}")
    shutil.copytree(checkpoint, checkpoints / checkpoint.name, dirs_exist_ok=True)


@register_backend
class LocalBackend(JobBackend):
    name = "local"
    options: ClassVar[type[BaseModel] | None] = LocalSpec
    code_runs_here = True  # and a Slurm job's, which runs this launcher on shared folders
    can_continue = True  # the continue file, as the stop file: in the job's folder

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        check_argv_limits(spec)  # past the OS's limits a job could never start
        cls.check_gpus(spec)

    @classmethod
    def check_gpus(cls, spec: RunSpec) -> None:
        """run_spec.local.gpus_per_job against the GPUs this machine shows the job."""
        gpus_wanted(local_of(spec).gpus_per_job, len(visible_devices(os.environ)))

    def room_beside(self, spec: RunSpec, others: int) -> bool:
        """A job on no GPU always; one on GPUs where this machine's device slots (gpus.py:
        its devices times REMEDY_JOBS_PER_GPU) hold it and `others` like it at once."""
        devices = visible_devices(os.environ)
        wanted = gpus_wanted(local_of(spec).gpus_per_job, len(devices))
        return wanted == 0 or len(devices) * jobs_per_gpu(os.environ) >= wanted * (1 + others)

    def paths(self, job_name: str) -> JobPaths:
        return JobPaths(self.run_dir / "jobs" / job_name)

    def exists(self, job_name: str) -> bool:
        return self.paths(job_name).job.exists()

    def launch(self, job_name: str, spec: RunSpec) -> None:
        paths = self.paths(job_name)
        if paths.job.exists():
            return  # launched before (e.g. by a flow that crashed right after): never twice
        self.write_job(job_name, spec, paths)  # from now on: launched
        with paths.supervisor_log.open("ab") as log:
            # Not waited for here: describe() reaps it (pid_alive), stop() signals its group.
            child = subprocess.Popen(
                supervisor_command(paths),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: survives the flow, stoppable whole
                env=without_secrets(os.environ),  # nor the supervisor sees notification targets
            )
        write_atomic(paths.supervisor_pid, f"{child.pid}\n")

    def write_job(self, job_name: str, spec: RunSpec, paths: JobPaths) -> None:
        """The job's folder: its inputs, then its launch record (job.json) last, whose
        presence means "launched"."""
        for folder in (paths.logs, paths.checkpoints, paths.model, paths.output_data):
            folder.mkdir(parents=True, exist_ok=True)
        if spec.init_checkpoint:
            place_warm_start(Path(spec.init_checkpoint), paths.checkpoints)
        hyperparameters = spec.job_hyperparameters(**path_flags(spec, paths))
        write_atomic(paths.hyperparameters, json.dumps(hyperparameters, indent=2))
        write_atomic(paths.debugger_config, json.dumps(debugger_config(spec, paths.tensors)))
        write_atomic(paths.rules, json.dumps(rule_configs(spec), indent=2))
        self.launch_record(job_name, spec, paths).write(paths.job)

    def launch_record(self, job_name: str, spec: RunSpec, paths: JobPaths) -> LaunchRecord:
        """job.json: what the supervisor runs (environment.py) and how it escalates a stop."""
        launch = job_launch(spec, job_name, paths)
        return LaunchRecord(
            job_name=job_name,
            entry_point=spec.entry_point,
            created=datetime.now(UTC).isoformat(),
            metric_definitions=spec.metric_definitions,
            command=launch.command,
            cwd=launch.cwd,
            env=launch.env,
            stop_grace_s=spec.stop_grace_s,
            kill_after_s=spec.kill_after_s,
            gpus_per_job=local_of(spec).gpus_per_job,
            progress_timeout_s=spec.progress_timeout_s,
            progress_timeout=spec.progress_timeout,
        )

    def launched(self, job_name: str, paths: JobPaths) -> LaunchRecord:
        """The job's launch record (JobNotFound: never launched here)."""
        record = LaunchRecord.read(paths.job)
        if record is None:
            raise JobNotFound(f"no job named {job_name!r} in {self.run_dir}")
        return record

    def _supervisor_pid(self, paths: JobPaths) -> int | None:
        """supervisor.pid, else what the supervisor wrote itself (a launch that died
        between starting it and writing the file)."""
        try:
            return int(paths.supervisor_pid.read_text())
        except (FileNotFoundError, ValueError):
            pid = (read_json(paths.status) or {}).get("supervisor_pid")
            return pid if isinstance(pid, int) else None

    def _supervisor_alive(self, paths: JobPaths) -> bool:
        pid = self._supervisor_pid(paths)
        return pid is not None and pid_alive(pid)

    def describe(self, job_name: str) -> JobSnapshot:
        paths = self.paths(job_name)
        record = self.launched(job_name, paths)
        status = read_json(paths.status) or {}  # written by the supervisor alone
        result = read_json_written_by_job(paths.result) or {}
        where = self.whereabouts(paths, record, status, result)
        # A job that writes no progress file still says in its result how far it got.
        progress = read_json_written_by_job(paths.progress) or (
            {"step": result["steps"]} if isinstance(result.get("steps"), int) else None
        )
        return JobSnapshot(
            name=job_name,
            **where,
            rules=self.rule_statuses(paths, where["status"] in FINAL_JOB_STATUSES),
            progress=Progress.model_validate(progress) if progress else None,
            final_metrics=self.final_metrics(paths, result),
        )

    def whereabouts(
        self, paths: JobPaths, record: LaunchRecord, status: dict[str, Any], result: dict
    ) -> dict[str, Any]:
        """The snapshot's fields saying where the job is (status, failure_reason,
        secondary_status, status_message, created, started, ended), from the supervisor's
        status.json and, for a job it no longer reports on, its processes."""
        job_status = JobStatus(status.get("TrainingJobStatus", "InProgress"))
        failure_reason = status.get("FailureReason")
        if job_status not in (JobStatus.Completed, JobStatus.Failed, JobStatus.Stopped):
            lost = self._lost_reason(paths, record, status)
            stopping = paths.stop_request.exists()
            if lost and stopping:
                job_status = JobStatus.Stopped  # ended by our own kill
            elif lost:
                job_status, failure_reason = JobStatus.Failed, lost
            elif stopping:
                job_status = JobStatus.Stopping
        if job_status is JobStatus.Failed and failure_reason == SUPERVISOR_GONE:
            # Its training process finished the work before anyone noticed: not redone.
            if result.get("status") in ("Completed", "Stopped"):
                job_status, failure_reason = JobStatus(result["status"]), None
        return {
            "status": job_status,
            "failure_reason": failure_reason,
            "secondary_status": status.get("SecondaryStatus"),
            "status_message": status.get("StatusMessage"),
            "created": record.created,
            "started": status.get("TrainingStartTime"),
            "ended": status.get("TrainingEndTime"),
        }

    def final_metrics(self, paths: JobPaths, result: dict[str, Any]) -> dict[str, float]:
        """The figures of result.json (RESULT_METRICS, then a script's own "metrics": {name:
        value}), and the last value of each metric the log showed (run_spec.
        metric_definitions), which wins: the user named it. Non-finite values are left out."""
        return result_metrics(result) | final_values(read_records(paths.log_metrics))

    def _lost_reason(self, paths: JobPaths, record: LaunchRecord, status: dict) -> str | None:
        """Why a job that is not final can never finish, or None while it may."""
        if self._supervisor_alive(paths):
            return None
        if status:  # it reported, then vanished; its training process may still run
            training = status.get("training_pid")
            if isinstance(training, int) and pid_alive(training):
                return None  # it ends on its own; stop() signals it
            return SUPERVISOR_GONE
        if self._supervisor_pid(paths) is not None:  # it died before its first word
            return (
                "ClientError: the job's supervisor exited before starting the job: "
                f"{error_line(paths.supervisor_log)}"
            )
        created = datetime.fromisoformat(record.created)
        if (datetime.now(UTC) - created).total_seconds() > START_TIMEOUT_S:
            return "InternalServerError: the job's supervisor never started"
        return None

    def rule_statuses(self, paths: JobPaths, job_ended: bool = False) -> list[RuleEvaluation]:
        """The rules' statuses; once the job has ended, a rule still pending never will be
        judged (its evaluator is gone): it reads as Error, saying so."""
        names = [rule["name"] for rule in read_json(paths.rules) or []]
        found = {
            status["RuleConfigurationName"]: RuleEvaluation.model_validate(status)
            for path in sorted(paths.rule_status.glob("*.json"))
            if (status := read_json(path))
        }
        for name in names if job_ended else []:
            rule = found.get(name)
            if rule is None or not rule.is_final:
                found[name] = RuleEvaluation(
                    name=name,
                    status=RuleWord.ERROR,
                    details="the job ended before the rule evaluator judged this rule "
                    f"(its last word: {rule.details if rule else 'none'})",
                )
        return list(found.values())

    def continue_job(self, job_name: str, until: int | None = None) -> None:
        """The continue file (REMEDY_CONTINUE_FILE): the held job trains on (to `until`)."""
        further = {CONTINUE_UNTIL_KEY: until} if until is not None else {}
        write_request(self.paths(job_name).continue_request, **further)

    def stop(self, job_name: str) -> None:
        """The stop file; the supervisor escalates (SIGTERM after run_spec.stop_grace_s,
        SIGKILL kill_after_s later). Only a supervisor that does not end the job in that
        time gets SIGKILL with its whole process group from here."""
        paths = self.paths(job_name)
        if self.describe(job_name).is_final:
            return
        try:
            write_request(paths.stop_request)
        except OSError:
            # A full disk takes no stop file: SIGTERM tells the supervisor instead
            # (it stops the training process at once, without the grace).
            self._signal_supervisor(paths, signal.SIGTERM)
        record = self.launched(job_name, paths)
        escalation = Escalation(record.stop_grace_s, record.kill_after_s)
        if self._wait_final(job_name, escalation.longest_s + SUPERVISOR_END_S):
            return
        self._signal_group(paths, signal.SIGKILL)
        if self._wait_final(job_name, 10):
            return
        # The supervisor is gone without a word: record the end ourselves.
        status = read_json(paths.status) or {"TrainingJobName": job_name}
        status.update(
            TrainingJobStatus="Stopped",
            SecondaryStatus="Stopped",
            TrainingEndTime=datetime.now(UTC).isoformat(),
        )
        write_atomic(paths.status, json.dumps(status, indent=2))

    def _signal_supervisor(self, paths: JobPaths, sig: signal.Signals) -> None:
        pid = self._supervisor_pid(paths)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _signal_group(self, paths: JobPaths, sig: signal.Signals) -> None:
        pid = self._supervisor_pid(paths)
        if pid is None:
            return
        # The supervisor leads its own group: training + evaluator too, and they stay in it
        # when the supervisor itself is gone. What left the group (setsid) is found in the
        # supervisor's process tree (it is a subreaper: process_tree.py) while it lives.
        for process in descendants(pid):
            signal_process(process, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def _wait_final(self, job_name: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.describe(job_name).is_final:
                return True
            time.sleep(0.1)
        return False

    def logs(self, job_name: str, tail: int = 50) -> str:
        path = self.paths(job_name).training_log
        if not path.exists():
            return ""
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=tail))

    def metrics(self, job_name: str) -> list[dict[str, Any]]:
        """metrics.jsonl as the job writes it, then the metric records found in its log."""
        paths = self.paths(job_name)
        return read_records(paths.metrics) + read_records(paths.log_metrics)

    def metrics_location(self, job_name: str) -> str:
        return self.paths(job_name).metrics.relative_to(self.run_dir).as_posix()

    def checkpoints(self, job_name: str) -> list[Checkpoint]:
        """Every folder in the job's checkpoint dir with a checkpoint sidecar (the built-in
        job's epoch-NNNN, a script's own, a warm start placed there), oldest first."""
        folder = self.paths(job_name).checkpoints
        found = [c for p in sorted(folder.glob("*")) if p.is_dir() and (c := read_checkpoint(p))]
        return sorted(found, key=lambda c: (c.step, c.epoch))

    def tensor_store(self, job_name: str) -> str | None:
        tensors = self.paths(job_name).tensors
        return str(tensors) if tensors.is_dir() else None

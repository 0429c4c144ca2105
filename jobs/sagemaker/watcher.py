"""Watches one cloud job from the orchestrator's side, beside the flow:

    python -m remedy.jobs.sagemaker.watcher <job folder>

- runs remedy's rule evaluator on the job's s3:// tensor store, as the local supervisor
  runs it beside a local job (the managed debugger's rules are not used);
- when the evaluator asks for a stop (a StopTraining rule fired: it creates the stop file),
  calls StopTrainingJob at once, without waiting for the flow;
- mirrors the files the job sends while it runs (its progress.json, the NaN guard's rule
  statuses: reports.py) into the job's folder, so a guard's finding is known at once;
- follows the store's losses into progress.json and metrics.jsonl (what the monitor shows
  and the verdict reads: the first and the latest training loss), numbered from the job's
  start_step (a warm start goes on from its checkpoint's step, as for a local job);
- once the job has ended, lets the evaluator judge what was written (it ends by itself
  when the store is closed) while it goes on judging, until drain_s pass without a word
  from it, then stops it (rules left Stopped).
Started detached by the backend at launch (and again by describe() when it finds the job
running unwatched); exits when its work is done. Never prints the bucket or the role.
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
from typing import Any

from remedy.debugger.evaluator import evaluator_command, wait_while_judging
from remedy.jobs.local.layout import read_json_written_by_job
from remedy.jobs.sagemaker import clients
from remedy.jobs.sagemaker.layout import CloudPaths, LocalPaths
from remedy.jobs.sagemaker.reports import mirror
from remedy.state_schema import write_atomic
from remedy.state_schema.job_env import PROGRESS_FILE, without_secrets
from remedy.state_schema.loss_windows import LossWindows

FINAL = ("Completed", "Failed", "Stopped")
EVALUATOR_STOP_S = 30.0
MAX_FAILURES = 30  # DescribeTrainingJob failing this many polls in a row: the watcher ends


def log(line: str) -> None:
    print(f"{datetime.now(UTC).isoformat(timespec='seconds')} {line}", flush=True)


# What only the job knows, taken from its own progress.json.
JOB_FIELDS = ("start_step", "total_steps", "steps_per_epoch", "epoch", "optimizers")


class StoreProgress:
    """progress.json and metrics.jsonl from the losses in the store. The store counts this
    launch's steps from 0; store step N is step start_step + N + 1 of the progress files, as
    the job counts (start_step: steps done before a warm start; the job's own progress.json
    says it, and until it has sent one the launch record does)."""

    def __init__(self, store: str, paths: LocalPaths, start_step: int = 0) -> None:
        self.store, self.paths = store, paths
        self.start_step = start_step  # the launch's word, until the job's own
        self.trial: Any = None
        self.last = -1
        self.first_loss: float | None = None
        self.loss_windows = LossWindows()  # of the store's losses, for a job that sends none

    def update(self) -> None:
        from remedy.debugger import create_trial

        job = read_json_written_by_job(self.paths.job_reports / PROGRESS_FILE) or {}
        start = job.get("start_step")
        start = start if isinstance(start, int) else self.start_step
        if self.trial is None:
            self.trial = create_trial(self.store)
        self.trial.refresh()
        steps = [step for step in self.trial.steps() if step > self.last]
        records = []
        if steps:
            names = self.trial.tensor_names(collection="losses")
            name = "loss" if "loss" in names else (names[0] if names else None)
            for step in steps:
                loss = self._loss(name, step)
                if self.last < 0 and self.first_loss is None and loss is not None:
                    self.first_loss = loss
                self.loss_windows.add(loss)
                numbered = start + step + 1
                records.append(
                    {"type": "step", "step": numbered, "loss": loss, "wall_time": time.time()}
                )
            self.last = steps[-1]
            with self.paths.metrics.open("a") as handle:
                handle.write("".join(json.dumps(r) + "\n" for r in records))
        if self.last < 0 and not job:
            return
        progress: dict[str, Any] = {
            "step": start + self.last + 1,
            "start_step": start,
            "loss": records[-1]["loss"] if records else self._latest_loss(),
            "first_loss": self.first_loss,
        } | self.loss_windows.fields()
        progress |= {field: job[field] for field in JOB_FIELDS if job.get(field) is not None}
        if isinstance(job.get("step"), int) and job["step"] >= progress["step"]:
            progress |= {"step": job["step"], "loss": job.get("loss")}
        if job.get("first_loss") is not None:  # the job's first step of this launch
            progress["first_loss"] = job["first_loss"]
        if job.get("first_losses") and job.get("last_losses"):  # the job's own, every step
            progress |= {"first_losses": job["first_losses"], "last_losses": job["last_losses"]}
        write_atomic(self.paths.progress, json.dumps(progress))

    def _latest_loss(self) -> float | None:
        written = read_json_written_by_job(self.paths.progress) or {}
        loss = written.get("loss")
        return float(loss) if isinstance(loss, (int, float)) else None

    def _loss(self, name: str | None, step: int) -> float | None:
        if name is None:
            return None
        try:
            value = float(self.trial.tensor(name).value(step).mean())
        except Exception:  # not saved at this step, or unreadable: no figure
            return None
        return value if math.isfinite(value) else None


class Watcher:
    def __init__(self, root: Path) -> None:
        self.paths = LocalPaths(root)
        self.record = json.loads(self.paths.record.read_text())
        self.cloud = CloudPaths(self.record["bucket"], self.record["training_job_name"])
        self.region = self.record["region"]
        self.poll_s = float(self.record.get("watch_poll_s", 10.0))
        self.drain_s = float(self.record.get("evaluator_drain_s", 120.0))
        start_step = int(self.record.get("start_step", 0))
        self.progress = StoreProgress(self.cloud.tensors, self.paths, start_step)
        self.evaluator: subprocess.Popen[bytes] | None = None
        self.stop_asked = False
        self.mirrored: dict[str, str] = {}  # the job's report files seen, by ETag

    def start_evaluator(self) -> subprocess.Popen[bytes]:
        command = evaluator_command(
            self.cloud.tensors,
            str(self.paths.rules),
            str(self.paths.rule_status),
            str(self.paths.stop_request),
            self.record.get("evaluator_poll_s", 2.0),
        )
        with self.paths.evaluator_log.open("ab") as handle:
            return subprocess.Popen(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=without_secrets(os.environ),
            )

    def describe(self) -> dict[str, Any]:
        name = self.cloud.training_job_name
        return clients.sagemaker(self.region).describe_training_job(TrainingJobName=name)

    def stop_job(self) -> None:
        name = self.cloud.training_job_name
        try:
            clients.sagemaker(self.region).stop_training_job(TrainingJobName=name)
        except Exception as error:  # e.g. the flow's own stop came first
            # The service's error code only: its message may name the bucket.
            code = getattr(error, "response", {}).get("Error", {}).get("Code")
            if code == "ValidationException":  # the service's word for "not InProgress"
                log(f"StopTrainingJob {name}: not needed, already stopping or ended")
            else:
                log(f"StopTrainingJob {name}: {type(error).__name__} {code or ''}".rstrip())
        else:
            log(f"StopTrainingJob {name}: a rule asked for it")

    def run(self) -> int:
        self.evaluator = self.start_evaluator()
        log(f"watching {self.cloud.training_job_name}; evaluator pid {self.evaluator.pid}")
        status, failures = "InProgress", 0
        while status not in FINAL:
            try:
                status = self.describe()["TrainingJobStatus"]
                failures = 0
            except Exception as error:  # a network hiccup: the next poll tries again
                failures += 1
                log(f"DescribeTrainingJob: {type(error).__name__}")
                if failures >= MAX_FAILURES:  # no such job, no credentials: describe() says
                    log(f"giving up after {failures} failed DescribeTrainingJob calls")
                    status = "Unknown"
                    break
            if self.paths.stop_request.exists() and not self.stop_asked and status not in FINAL:
                self.stop_asked = True
                self.stop_job()
            self.follow_job()
            if status not in FINAL:
                time.sleep(self.poll_s)
        log(f"job ended: {status}")
        self.finish_evaluator()
        self.follow_job()
        return 0

    def follow_job(self) -> None:
        """The files the job sent, then the store's losses."""
        try:
            mirror(clients.s3(self.region), self.cloud, self.paths.job_reports, self.mirrored)
        except Exception as error:  # the message may name the bucket: not logged
            log(f"reading the job's report files: {type(error).__name__}")
        try:
            self.progress.update()
        except Exception as error:
            log(f"reading the store's losses: {type(error).__name__}")

    def finish_evaluator(self) -> None:
        evaluator = self.evaluator
        if evaluator is None:
            return
        status_dir = self.paths.rule_status
        poll_s = min(self.poll_s, 1.0)
        if not wait_while_judging(evaluator, status_dir, self.drain_s, poll_s, self.follow_job):
            evaluator.terminate()  # judges what is written, marks the rest Stopped
            try:
                evaluator.wait(timeout=EVALUATOR_STOP_S)
            except subprocess.TimeoutExpired:
                evaluator.kill()
                evaluator.wait()
        log(f"rule evaluator exited with status {evaluator.returncode}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    watcher = Watcher(Path(args[0]))
    write_atomic(watcher.paths.watcher_pid, f"{os.getpid()}\n")

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        return watcher.run()
    finally:
        if watcher.evaluator is not None and watcher.evaluator.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                watcher.evaluator.terminate()


if __name__ == "__main__":
    sys.exit(main())

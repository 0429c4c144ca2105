"""The cloud training service's backend (run_spec.backend "sagemaker"), through boto3.

launch() packs and uploads the source (source.py), copies a warm start's checkpoint into
the new job's checkpoint prefix, calls CreateTrainingJob (request.py) and starts the
watcher beside the flow (watcher.py: remedy's rule evaluator on the job's s3:// store,
StopTrainingJob when a rule asks, progress from the store's losses). describe() is
DescribeTrainingJob mapped to the typed snapshot (snapshot.py) with the rules' statuses;
stop() is StopTrainingJob, waited on; logs() reads the job's CloudWatch Logs streams.

The local folder <run_dir>/jobs/<job>/ holds the launch record (sagemaker.json: the
service's job name, region and bucket, so every call finds the job from its name alone),
the rules, their statuses and the watcher's files. Credentials are boto3's own chain.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

from remedy.debugger.s3 import parse_uri
from remedy.jobs.base import (
    FINAL_JOB_STATUSES,
    JobBackend,
    JobNotFound,
    JobSnapshot,
    Progress,
    RuleEvaluation,
    RuleWord,
)
from remedy.jobs.local.backend import debugger_config, pid_alive, result_metrics, rule_configs
from remedy.jobs.local.layout import read_json, read_json_written_by_job
from remedy.jobs.local.log_metrics import read_records
from remedy.jobs.registry import register_backend
from remedy.jobs.sagemaker import clients
from remedy.jobs.sagemaker.layout import CloudPaths, LocalPaths, warm_start_folder
from remedy.jobs.sagemaker.naming import training_job_name
from remedy.jobs.sagemaker.reports import mirror
from remedy.jobs.sagemaker.request import create_training_job_request, sagemaker_of
from remedy.jobs.sagemaker.service_model import check_request
from remedy.jobs.sagemaker.snapshot import job_snapshot, scrub
from remedy.jobs.sagemaker.source import pack, upload
from remedy.state_schema import CHECKPOINT_META_FILE, Checkpoint, JobStatus, RunSpec, write_atomic
from remedy.state_schema.job_env import RESULT_FILE, RULE_STATUS_DIR, without_secrets
from remedy.state_schema.sagemaker_spec import SageMakerSpec

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
STOP_POLL_S = 5.0
STOP_TIMEOUT_S = 300.0  # SIGTERM, 120 s, SIGKILL, then the upload of what was written


@register_backend
class SageMakerBackend(JobBackend):
    name = "sagemaker"
    options = SageMakerSpec
    # How often the watcher polls DescribeTrainingJob and the evaluator the store; tests
    # shorten them (the service's own status changes take tens of seconds).
    watch_poll_s = 10.0
    evaluator_poll_s = 2.0
    evaluator_drain_s = 120.0
    stop_poll_s = STOP_POLL_S

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        from remedy.jobs.sagemaker.checks import check_cloud_spec

        if spec.local is not None and spec.local.tensorboard:
            # never ignored: the cloud job's tensors stay in its bucket
            raise ValueError(
                "run_spec.local.tensorboard: the local backend's option (cloud: false)"
            )
        check_cloud_spec(spec)

    def paths(self, job_name: str) -> LocalPaths:
        return LocalPaths(self.run_dir / "jobs" / job_name)

    def record(self, job_name: str) -> dict[str, Any]:
        record = read_json(self.paths(job_name).record)
        if record is None:
            raise JobNotFound(f"no job named {job_name!r} in {self.run_dir}")
        return record

    def cloud(self, record: dict[str, Any]) -> CloudPaths:
        return CloudPaths(record["bucket"], record["training_job_name"])

    def exists(self, job_name: str) -> bool:
        return self.paths(job_name).record.exists()

    # -- launch -------------------------------------------------------------------------

    def launch(self, job_name: str, spec: RunSpec) -> None:
        paths = self.paths(job_name)
        if paths.record.exists():
            return  # launched before (e.g. by a flow that crashed right after): never twice
        fields = sagemaker_of(spec)
        assert fields.region and fields.bucket  # the preflight refuses a spec without them
        cloud = CloudPaths(fields.bucket, training_job_name(job_name, str(self.run_dir)))
        request = create_training_job_request(spec, cloud, fields.region)
        paths.root.mkdir(parents=True, exist_ok=True)
        paths.rule_status.mkdir(exist_ok=True)
        write_atomic(paths.rules, json.dumps(rule_configs(spec), indent=2))
        s3 = clients.s3(fields.region)
        upload(
            s3, fields.bucket, cloud.source_key, pack(spec, self.job_debugger_config(spec, cloud))
        )
        start_step = 0
        if spec.init_checkpoint:
            start_step = copy_warm_start(s3, spec.init_checkpoint, cloud)
        if not spec.job.counts_on_from_warm_start:
            start_step = 0  # a script's launcher counts its own steps from 0, as locally
        sagemaker = clients.sagemaker(fields.region)
        try:
            sagemaker.create_training_job(**request)
        except Exception as error:
            if _code(error) != "ResourceInUse":  # ours, created before a crash: adopted
                raise
        record = {
            "job_name": job_name,
            "training_job_name": cloud.training_job_name,
            "region": fields.region,
            "bucket": fields.bucket,
            "created": datetime.now(UTC).isoformat(),
            # Steps done before this launch (the built-in job goes on from a warm start's
            # step); the job's own progress.json says so too, once it has sent one.
            "start_step": start_step,
            "watch_poll_s": self.watch_poll_s,
            "evaluator_poll_s": self.evaluator_poll_s,
            "evaluator_drain_s": self.evaluator_drain_s,
            # The service reads its MetricDefinitions as printed: these are percentages.
            "percent_metrics": [d.name for d in spec.metric_definitions if d.percent],
        }
        write_atomic(paths.record, json.dumps(record, indent=2))  # from now on: launched
        self.start_watcher(job_name)

    def job_debugger_config(self, spec: RunSpec, cloud: CloudPaths) -> dict[str, Any]:
        """What the job saves (derived from its rules, as for a local job), into the store
        under the bucket."""
        config = debugger_config(spec, self.run_dir)  # out_dir replaced below
        config["out_dir"] = cloud.tensors
        return config

    def start_watcher(self, job_name: str) -> None:
        paths = self.paths(job_name)
        with paths.watcher_log.open("ab") as handle:
            child = subprocess.Popen(
                [sys.executable, "-m", "remedy.jobs.sagemaker.watcher", str(paths.root)],
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the flow's task, as a local supervisor
                env=without_secrets(os.environ),
            )
        write_atomic(paths.watcher_pid, f"{child.pid}\n")

    def watcher_alive(self, job_name: str) -> bool:
        try:
            pid = int(self.paths(job_name).watcher_pid.read_text())
        except (FileNotFoundError, ValueError):
            return False
        return pid_alive(pid)

    # -- describe -------------------------------------------------------------------------

    def describe(self, job_name: str) -> JobSnapshot:
        record = self.record(job_name)
        cloud = self.cloud(record)
        request = {"TrainingJobName": cloud.training_job_name}
        check_request("DescribeTrainingJob", request)
        described = clients.sagemaker(record["region"]).describe_training_job(**request)
        status = JobStatus(described["TrainingJobStatus"])
        watched = self.watcher_alive(job_name)
        if status not in FINAL_JOB_STATUSES and not watched:
            self.start_watcher(job_name)  # a restarted orchestrator: the job is watched again
            watched = True
        final = status in FINAL_JOB_STATUSES
        paths = self.paths(job_name)
        # What the job sent last: the watcher may have missed it, or, still draining the
        # evaluator, not have copied the job's result yet.
        if final and (not watched or not (paths.job_reports / RESULT_FILE).is_file()):
            mirror(clients.s3(record["region"]), cloud, paths.job_reports)
        rules = self.rule_statuses(job_name, judged_for_good=final and not watched)
        progress = read_json_written_by_job(paths.progress)
        metrics = {}
        if progress and isinstance(progress.get("loss"), (int, float)):
            metrics["train:loss"] = float(progress["loss"])
        metrics |= result_metrics(read_json_written_by_job(paths.job_reports / RESULT_FILE) or {})
        return job_snapshot(
            job_name,
            described,
            rules,
            Progress.model_validate(progress) if progress else None,
            metrics,
            private=(record["bucket"],),
            percent=record.get("percent_metrics", ()),
        )

    def rule_statuses(self, job_name: str, judged_for_good: bool) -> list[RuleEvaluation]:
        """The evaluator's statuses, and those the job's NaN guard wrote (sent by the job
        while it runs, mirrored here by the watcher: reports.py). Once the job has ended and
        its watcher is gone, a rule still pending never will be judged: Error, saying so."""
        paths = self.paths(job_name)
        found = {}
        for folder in (paths.rule_status, paths.job_reports / RULE_STATUS_DIR):
            for path in sorted(folder.glob("*.json")):
                if status := read_json_written_by_job(path):
                    with contextlib.suppress(ValueError):
                        rule = RuleEvaluation.model_validate(status)
                        found[rule.name] = rule
        if judged_for_good:
            for rule in read_json(paths.rules) or []:
                name = rule["name"]
                if name not in found or not found[name].is_final:
                    said = found[name].details if name in found else "none"
                    found[name] = RuleEvaluation(
                        name=name,
                        status=RuleWord.ERROR,
                        details="the job ended before the rule evaluator judged this rule "
                        f"(its last word: {said})",
                    )
        return list(found.values())

    # -- stop, logs, artefacts -----------------------------------------------------------

    def stop(self, job_name: str) -> None:
        """StopTrainingJob (the service sends SIGTERM, then SIGKILL 120 s later), then wait
        until the job has ended."""
        record = self.record(job_name)
        if self.describe(job_name).is_final:
            return
        request = {"TrainingJobName": self.cloud(record).training_job_name}
        check_request("StopTrainingJob", request)
        try:
            clients.sagemaker(record["region"]).stop_training_job(**request)
        except Exception as error:
            if _code(error) != "ValidationException":  # it ended meanwhile
                raise
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and not self.describe(job_name).is_final:
            time.sleep(self.stop_poll_s)

    def logs(self, job_name: str, tail: int = 50) -> str:
        """The last lines of the job's CloudWatch Logs streams (<training job>/algo-N-...)."""
        record = self.record(job_name)
        name = self.cloud(record).training_job_name
        client = clients.logs(record["region"])
        try:
            streams = client.describe_log_streams(
                logGroupName=LOG_GROUP, logStreamNamePrefix=f"{name}/"
            ).get("logStreams", [])
        except Exception as error:
            if _code(error) == "ResourceNotFoundException":
                return ""  # no log yet
            raise
        lines: list[str] = []
        for stream in sorted(streams, key=lambda s: s["logStreamName"]):
            events = client.get_log_events(
                logGroupName=LOG_GROUP,
                logStreamName=stream["logStreamName"],
                limit=tail,
                startFromHead=False,
            ).get("events", [])
            lines += [event["message"].rstrip("\n") for event in events]
        text = "\n".join(lines[-tail:])
        return (scrub(text, record["bucket"]) or "") + ("\n" if text else "")

    def metrics(self, job_name: str) -> list[dict[str, Any]]:
        """One step record per loss in the store (the watcher's metrics.jsonl)."""
        return read_records(self.paths(job_name).metrics)

    def metrics_location(self, job_name: str) -> str:
        return self.paths(job_name).metrics.relative_to(self.run_dir).as_posix()

    def checkpoints(self, job_name: str) -> list[Checkpoint]:
        """Checkpoint folders under the job's checkpoint prefix (the service syncs
        /opt/ml/checkpoints there), each with its sidecar; paths are s3:// URIs."""
        record = self.record(job_name)
        cloud = self.cloud(record)
        where = parse_uri(cloud.checkpoints)
        s3 = clients.s3(record["region"])
        found = []
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=where.bucket, Prefix=where.key("")
        )
        for page in pages:
            for item in page.get("Contents", []):
                key = item["Key"]
                if not key.endswith(f"/{CHECKPOINT_META_FILE}"):
                    continue
                with contextlib.suppress(Exception):
                    meta = json.loads(s3.get_object(Bucket=where.bucket, Key=key)["Body"].read())
                    folder = key.rsplit("/", 1)[0]
                    found.append(
                        Checkpoint(
                            path=f"s3://{where.bucket}/{folder}",
                            epoch=int(meta["epoch"]),
                            step=int(meta["step"]),
                        )
                    )
        return sorted(found, key=lambda c: (c.step, c.epoch))

    def tensor_store(self, job_name: str) -> str | None:
        return self.cloud(self.record(job_name)).tensors


def copy_warm_start(s3: Any, checkpoint: str, cloud: CloudPaths) -> int:
    """A warm start: the checkpoint folder (an s3:// prefix, from checkpoints()) copied into
    the new job's checkpoint prefix, which the service restores into /opt/ml/checkpoints
    (REMEDY_CHECKPOINT_DIR) before the script starts, as the local backend places it.
    Returns the checkpoint's step (its sidecar's; 0 when it has none)."""
    source = parse_uri(checkpoint)
    target = parse_uri(cloud.checkpoints)
    name = warm_start_folder(checkpoint).rsplit("/", 1)[-1]
    copied, step = 0, 0
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=source.bucket, Prefix=source.prefix + "/"
    ):
        for item in page.get("Contents", []):
            relative = item["Key"][len(source.prefix) + 1 :]
            s3.copy_object(
                Bucket=target.bucket,
                Key=target.key(f"{name}/{relative}"),
                CopySource={"Bucket": source.bucket, "Key": item["Key"]},
            )
            copied += 1
            if relative == CHECKPOINT_META_FILE:
                with contextlib.suppress(Exception):
                    meta = s3.get_object(Bucket=source.bucket, Key=item["Key"])["Body"].read()
                    step = int(json.loads(meta)["step"])
    if not copied:
        raise FileNotFoundError(f"run_spec.init_checkpoint: no checkpoint at {name}")
    return step


def _code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))

"""A stand-in for the cloud training service where only the compute is faked.

An HTTP server speaking the service's JSON protocol (awsJson1.1, `X-Amz-Target:
SageMaker.<Operation>`), for boto3 clients pointed at it with AWS_ENDPOINT_URL_SAGEMAKER.
Every request is validated against botocore's model of the service (the validator botocore
applies to its own calls) and every answer against the operation's output shape, so the
backend can only send what the service takes and only read what it returns.

CreateTrainingJob does what the service does for a script-mode job, with moto's real S3
server as the bucket and a local folder as the container's /opt/ml:
  - downloads sagemaker_submit_directory (sourcedir.tar.gz) into /opt/ml/code, writes
    /opt/ml/input/config/hyperparameters.json (the HyperParameters as sent), restores the
    CheckpointConfig prefix into /opt/ml/checkpoints;
  - runs `python <sagemaker_program> --name value ...` as the training toolkit does, as a
    local process, with the request's Environment (paths under /opt/ml moved to the local
    folder) and the SM_* variables the toolkit sets;
  - syncs /opt/ml/checkpoints to the checkpoint prefix while the job runs and at its end,
    sends the job's output to CloudWatch Logs (moto's) in /aws/sagemaker/TrainingJobs,
    <job>/algo-1-<time>, and uploads /opt/ml/model as model.tar.gz at the end.
DescribeTrainingJob answers from that process's state; StopTrainingJob sends it SIGTERM
(SIGKILL after the grace period), as the service does.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import botocore.session
from botocore.validate import ParamValidator

TARGET_PREFIX = "SageMaker."
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
CONTAINER_ROOT = "/opt/ml"
ACCOUNT = "123456789012"


class ServiceError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def service_model() -> Any:
    return botocore.session.get_session().get_service_model("sagemaker")


def validated(shape: Any, value: dict[str, Any], what: str) -> None:
    report = ParamValidator().validate(value, shape)
    if report.has_errors():
        raise ServiceError("ValidationException", f"{what}: {report.generate_report()}")


def s3_location(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key.strip("/")


def toolkit_arguments(hyperparameters: dict[str, str]) -> list[str]:
    """The training toolkit's command line: `--name value`, values decoded from JSON and
    written with str() (True, [1, 2]); its own sagemaker_* entries left out."""
    found = []
    for name, raw in hyperparameters.items():
        if name.startswith("sagemaker_"):
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        found += [f"--{name}", str(value)]
    return found


class TrainingJob:
    """One job: its request, the local process that stands in for its container, its state."""

    def __init__(self, request: dict[str, Any], root: Path, region: str, grace_s: float) -> None:
        self.request = request
        self.name: str = request["TrainingJobName"]
        self.root = root / self.name
        self.region, self.grace_s = region, grace_s
        self.status, self.secondary = "InProgress", "Starting"
        self.transitions: list[dict[str, Any]] = []
        self.failure_reason: str | None = None
        self.created = datetime.now(UTC)
        self.started: datetime | None = None
        self.ended: datetime | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.stop_asked = False
        self.stopped_as = "Stopped"  # the secondary status a stopped job ends in
        self.synced: dict[str, int] = {}  # checkpoint files sent, by modification time
        self.lock = threading.Lock()
        self.s3 = boto3.client("s3", region_name=region)
        self.logs = boto3.client("logs", region_name=region)
        self.move_to("Starting", "Preparing the instances for training")
        threading.Thread(target=self.run, name=f"job {self.name}", daemon=True).start()

    def local(self, value: str) -> str:
        """A path in the container (under /opt/ml) as a path in this job's folder."""
        if value != CONTAINER_ROOT and not value.startswith(CONTAINER_ROOT + "/"):
            return value
        return str(self.root) + value.removeprefix(CONTAINER_ROOT)

    def move_to(self, secondary: str, message: str) -> None:
        now = datetime.now(UTC)
        if self.transitions:
            self.transitions[-1]["EndTime"] = now
        self.secondary = secondary
        self.transitions.append({"Status": secondary, "StartTime": now, "StatusMessage": message})

    # -- the job's life -----------------------------------------------------------------

    def run(self) -> None:
        try:
            self.prepare()
            code = self.train()
            self.finish(code)
        except Exception as error:  # the fake's own failure: the job fails, saying why
            self.end("Failed", "Failed", f"InternalServerError: {type(error).__name__}: {error}")

    def prepare(self) -> None:
        hyperparameters = self.request.get("HyperParameters", {})
        for folder in ("code", "checkpoints", "model", "output/data", "input/config"):
            Path(self.local(f"{CONTAINER_ROOT}/{folder}")).mkdir(parents=True, exist_ok=True)
        config = Path(self.local(f"{CONTAINER_ROOT}/input/config"))
        (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
        (config / "resourceconfig.json").write_text(
            json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]})
        )
        (config / "inputdataconfig.json").write_text("{}")
        self.move_to("Downloading", "Downloading the training image and the source")
        bucket, key = s3_location(json.loads(hyperparameters["sagemaker_submit_directory"]))
        archive = self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as unpacked:
            unpacked.extractall(self.local(f"{CONTAINER_ROOT}/code"), filter="data")
        checkpoint = self.request.get("CheckpointConfig")
        if checkpoint:
            self.sync_checkpoints(download=True)

    def environment(self) -> dict[str, str]:
        """What the container's process sees: the request's Environment and the toolkit's
        SM_* variables, with /opt/ml moved here; AWS_* (moto's endpoint and keys) stand in
        for the execution role's credentials, REMEDY_TORCH_THREADS for the instance's cores."""
        kept = ("PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "REMEDY_TORCH_THREADS")
        env = {name: value for name, value in os.environ.items() if name in kept}
        env |= {n: v for n, v in os.environ.items() if n.startswith("AWS_")}
        env.pop("AWS_ENDPOINT_URL_SAGEMAKER", None)
        env["AWS_DEFAULT_REGION"] = self.region
        env |= {n: self.local(v) for n, v in self.request.get("Environment", {}).items()}
        hyperparameters = self.request.get("HyperParameters", {})
        program = json.loads(hyperparameters["sagemaker_program"])
        env |= {
            "SM_MODEL_DIR": self.local(f"{CONTAINER_ROOT}/model"),
            "SM_INPUT_DIR": self.local(f"{CONTAINER_ROOT}/input"),
            "SM_INPUT_CONFIG_DIR": self.local(f"{CONTAINER_ROOT}/input/config"),
            "SM_OUTPUT_DIR": self.local(f"{CONTAINER_ROOT}/output"),
            "SM_OUTPUT_DATA_DIR": self.local(f"{CONTAINER_ROOT}/output/data"),
            "SM_MODULE_DIR": hyperparameters["sagemaker_submit_directory"],
            "SM_USER_ENTRY_POINT": program,
            "SM_HPS": json.dumps(
                {
                    n: json.loads(v)
                    for n, v in hyperparameters.items()
                    if not n.startswith("sagemaker_")
                }
            ),
            "SM_CURRENT_HOST": "algo-1",
            "SM_HOSTS": '["algo-1"]',
            "SM_NUM_GPUS": "0",
            "SM_NUM_CPUS": "1",
            "SM_CHANNELS": "[]",
            "TRAINING_JOB_NAME": self.name,
        }
        return env

    def train(self) -> int:
        hyperparameters = self.request.get("HyperParameters", {})
        program = json.loads(hyperparameters["sagemaker_program"])
        command = [sys.executable, program, *toolkit_arguments(hyperparameters)]
        with self.lock:
            if self.stop_asked:  # stopped before it started
                return -signal.SIGTERM
            self.started = datetime.now(UTC)
            self.move_to("Training", "Training image download completed. Training in progress.")
            self.process = subprocess.Popen(
                command,
                cwd=self.local(f"{CONTAINER_ROOT}/code"),
                env=self.environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        logger = threading.Thread(target=self.send_logs, daemon=True)
        logger.start()
        limit = self.request["StoppingCondition"]["MaxRuntimeInSeconds"]
        while self.process.poll() is None:
            self.sync_checkpoints()
            if (datetime.now(UTC) - self.started).total_seconds() > limit:
                self.stop("MaxRuntimeExceeded")
            time.sleep(0.5)
        logger.join(timeout=30)
        return self.process.returncode

    def finish(self, code: int) -> None:
        self.move_to("Uploading", "Uploading generated training model")
        self.sync_checkpoints()
        output = self.request["OutputDataConfig"]["S3OutputPath"]
        bucket, prefix = s3_location(output)
        model = io.BytesIO()
        with tarfile.open(fileobj=model, mode="w:gz") as archive:
            archive.add(self.local(f"{CONTAINER_ROOT}/model"), arcname=".")
        key = f"{prefix}/{self.name}/output/model.tar.gz".lstrip("/")
        self.s3.put_object(Bucket=bucket, Key=key, Body=model.getvalue())
        if self.stop_asked:
            self.end("Stopped", self.stopped_as)
        elif code == 0:
            self.end("Completed", "Completed")
        else:
            reason = (
                "AlgorithmError: ExecuteUserScriptError:\nExitCode "
                f'{code}\nErrorMessage ""\nCommand "{sys.executable} ..."'
            )
            self.end("Failed", "Failed", reason)

    def end(self, status: str, secondary: str, reason: str | None = None) -> None:
        with self.lock:
            self.ended = datetime.now(UTC)
            self.failure_reason = reason
            self.move_to(secondary, reason or f"Training job {status.lower()}")
            self.status = status

    def stop(self, why: str = "Stopping") -> None:
        """SIGTERM now, SIGKILL after the grace period."""
        with self.lock:
            self.stop_asked = True
            self.status = "Stopping"
            self.stopped_as = "MaxRuntimeExceeded" if why == "MaxRuntimeExceeded" else "Stopped"
            self.move_to(why, "Stopping the training job")
            process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            timer = threading.Timer(self.grace_s, self.kill, args=(process,))
            timer.daemon = True
            timer.start()

    @staticmethod
    def kill(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.kill()

    # -- S3 and CloudWatch Logs -----------------------------------------------------------

    def sync_checkpoints(self, download: bool = False) -> None:
        """/opt/ml/checkpoints <-> CheckpointConfig.S3Uri (new or changed files)."""
        config = self.request.get("CheckpointConfig")
        if not config:
            return
        bucket, prefix = s3_location(config["S3Uri"])
        local = Path(self.local(config.get("LocalPath", f"{CONTAINER_ROOT}/checkpoints")))
        if download:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix + "/"
            )
            for page in pages:
                for item in page.get("Contents", []):
                    target = local / item["Key"][len(prefix) + 1 :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    body = self.s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                    target.write_bytes(body)
            self.synced = {str(p): p.stat().st_mtime_ns for p in local.rglob("*") if p.is_file()}
            return
        for path in sorted(files_under(local)):
            relative = path.relative_to(local)
            try:
                if not path.is_file() or self.synced.get(str(path)) == path.stat().st_mtime_ns:
                    continue
                stamp, body = path.stat().st_mtime_ns, path.read_bytes()
            except FileNotFoundError:  # renamed or pruned since it was listed: the next sync
                continue
            self.s3.put_object(Bucket=bucket, Key=f"{prefix}/{relative.as_posix()}", Body=body)
            self.synced[str(path)] = stamp

    def send_logs(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        stream = f"{self.name}/algo-1-{int(time.time())}"
        try:
            self.logs.create_log_group(logGroupName=LOG_GROUP)
        except self.logs.exceptions.ResourceAlreadyExistsException:
            pass
        self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        with open(self.root / "container.log", "ab") as copy:
            for raw in self.process.stdout:
                copy.write(raw)
                copy.flush()
                message = raw.decode(errors="replace").rstrip("\n") or " "
                event = {"timestamp": int(time.time() * 1000), "message": message}
                try:
                    self.logs.put_log_events(
                        logGroupName=LOG_GROUP, logStreamName=stream, logEvents=[event]
                    )
                except Exception as error:  # keep reading: a full pipe would stall the job
                    copy.write(f"[fake service: line not sent to logs: {error}]\n".encode())

    # -- what DescribeTrainingJob says ----------------------------------------------------

    def described(self) -> dict[str, Any]:
        with self.lock:
            request = self.request
            output = request["OutputDataConfig"]["S3OutputPath"].rstrip("/")
            answer: dict[str, Any] = {
                "TrainingJobName": self.name,
                "TrainingJobArn": f"arn:aws:sagemaker:{self.region}:{ACCOUNT}:"
                f"training-job/{self.name.lower()}",
                "ModelArtifacts": {"S3ModelArtifacts": f"{output}/{self.name}/output/model.tar.gz"},
                "TrainingJobStatus": self.status,
                "SecondaryStatus": self.secondary,
                "HyperParameters": request.get("HyperParameters", {}),
                "AlgorithmSpecification": request["AlgorithmSpecification"],
                "RoleArn": request["RoleArn"],
                "OutputDataConfig": request["OutputDataConfig"],
                "ResourceConfig": request["ResourceConfig"],
                "StoppingCondition": request["StoppingCondition"],
                "CreationTime": self.created,
                "SecondaryStatusTransitions": [dict(t) for t in self.transitions],
                "EnableManagedSpotTraining": request.get("EnableManagedSpotTraining", False),
                "Environment": request.get("Environment", {}),
            }
            if "CheckpointConfig" in request:
                answer["CheckpointConfig"] = request["CheckpointConfig"]
            if self.started:
                answer["TrainingStartTime"] = self.started
            if self.ended:
                answer["TrainingEndTime"] = self.ended
            if self.started:
                end = self.ended or datetime.now(UTC)
                seconds = max(1, math.ceil((end - self.started).total_seconds()))
                answer["TrainingTimeInSeconds"] = seconds
                answer["BillableTimeInSeconds"] = seconds
            if self.failure_reason:
                answer["FailureReason"] = self.failure_reason
            return answer


class FakeTrainingService:
    """The endpoint: operations by X-Amz-Target, each validated against botocore's model."""

    def __init__(self, root: Path, region: str, grace_s: float = 120.0) -> None:
        self.root, self.region, self.grace_s = root, region, grace_s
        self.model = service_model()
        self.jobs: dict[str, TrainingJob] = {}
        self.calls: list[str] = []  # operation names, in order
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeTrainingService:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        for job in self.jobs.values():
            if job.process is not None and job.process.poll() is None:
                job.process.kill()

    def answer(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        if operation not in self.model.operation_names:
            raise ServiceError("UnknownOperationException", f"no operation {operation}")
        model = self.model.operation_model(operation)
        validated(model.input_shape, request, operation)
        with self.lock:
            self.calls.append(operation)
        handle = getattr(self, operation, None)
        if handle is None:
            raise ServiceError("InternalFailure", f"the fake does not do {operation}", 500)
        response = handle(request)
        validated(model.output_shape, response, f"{operation} response")
        return response

    def job(self, name: str) -> TrainingJob:
        try:
            return self.jobs[name]
        except KeyError:
            raise ServiceError("ValidationException", "Requested resource not found.") from None

    def CreateTrainingJob(self, request: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        name = request["TrainingJobName"]
        with self.lock:
            if name in self.jobs:
                raise ServiceError("ResourceInUse", f"Training job {name} already exists")
            self.jobs[name] = TrainingJob(request, self.root, self.region, self.grace_s)
        return {"TrainingJobArn": self.jobs[name].described()["TrainingJobArn"]}

    def DescribeTrainingJob(self, request: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        return self.job(request["TrainingJobName"]).described()

    def StopTrainingJob(self, request: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        job = self.job(request["TrainingJobName"])
        if job.status != "InProgress":
            raise ServiceError(
                "ValidationException",
                f"The request was rejected because the training job is in status {job.status}.",
            )
        job.stop()
        return {}

    def handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                target = self.headers.get("X-Amz-Target", "")
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    if not target.startswith(TARGET_PREFIX):
                        raise ServiceError("UnknownOperationException", f"target {target!r}")
                    request = json.loads(self.rfile.read(length) or b"{}")
                    body, status = service.answer(target[len(TARGET_PREFIX) :], request), 200
                except ServiceError as error:
                    body = {"__type": error.code, "message": error.message}
                    status = error.status
                data = json.dumps(body, default=epoch_seconds).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-amzn-RequestId", "fake")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the calls are in service.calls

        return Handler


def epoch_seconds(value: Any) -> float:
    """The JSON protocol's timestamps: seconds since the epoch."""
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(f"{type(value).__name__} is not JSON")


def files_under(folder: Path) -> list[Path]:
    """The files under `folder`, none in or named like a dot-entry (being written: the job
    writes a file or folder, then renames it). os.walk skips a folder renamed away while it
    is walked, where Path.rglob raised FileNotFoundError from inside its walk (a job's
    temporary checkpoint folder, renamed into place mid-sync: a Failed job in CI)."""
    found = []
    for root, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".")]
        found += [Path(root, name) for name in files if not name.startswith(".")]
    return found

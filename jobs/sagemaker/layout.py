"""Where a cloud job keeps its things: a local folder under <run_dir>/jobs/<job name>/ (the
launch record, the rule evaluator's statuses, its log) and one prefix in the bucket:

    s3://BUCKET/remedy/<training job name>/
        source/sourcedir.tar.gz   the packed source_dir (sagemaker_submit_directory)
        tensors/                  the tensor store the job writes (the debugger's s3:// store)
        checkpoints/              CheckpointConfig.S3Uri: /opt/ml/checkpoints, synced
        output/                   OutputDataConfig.S3OutputPath: model.tar.gz, output.tar.gz
        remedy/                   result.json, progress.json, the NaN guard's rule status
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from remedy.state_schema.job_env import METRICS_FILE, PROGRESS_FILE, RULE_STATUS_DIR

KEY_ROOT = "remedy"
SOURCE_ARCHIVE = "sourcedir.tar.gz"

# Paths inside the training container (the toolkit's, and remedy's beside them).
CODE_DIR = "/opt/ml/code"
CHECKPOINT_DIR = "/opt/ml/checkpoints"
OUTPUT_DIR = "/opt/ml/output/data/remedy"
PACKED_DIR = ".remedy"  # remedy's files inside sourcedir.tar.gz
DEBUGGER_CONFIG = f"{PACKED_DIR}/debugger.json"


def warm_start_folder(checkpoint: str) -> str:
    """Where a warm start's checkpoint (an s3:// folder a job wrote) is in the next job's
    container: the service restores the job's checkpoint prefix, into which the backend
    copies it under its own name, into CHECKPOINT_DIR."""
    return f"{CHECKPOINT_DIR}/{checkpoint.rstrip('/').rsplit('/', 1)[-1]}"


@dataclass(frozen=True)
class CloudPaths:
    bucket: str
    training_job_name: str

    @property
    def prefix(self) -> str:
        return f"{KEY_ROOT}/{self.training_job_name}"

    def uri(self, relative: str = "") -> str:
        return f"s3://{self.bucket}/{self.prefix}/{relative}".rstrip("/")

    @property
    def source_key(self) -> str:
        return f"{self.prefix}/source/{SOURCE_ARCHIVE}"

    @property
    def source(self) -> str:
        return f"s3://{self.bucket}/{self.source_key}"

    @property
    def tensors(self) -> str:
        return self.uri("tensors")

    @property
    def checkpoints(self) -> str:
        return self.uri("checkpoints")

    @property
    def output(self) -> str:
        return self.uri("output")

    @property
    def reports(self) -> str:
        return self.uri("remedy")


@dataclass(frozen=True)
class LocalPaths:
    root: Path

    @property
    def record(self) -> Path:  # its presence means "launched"
        return self.root / "sagemaker.json"

    @property
    def rules(self) -> Path:
        return self.root / "rules.json"

    @property
    def rule_status(self) -> Path:
        return self.root / RULE_STATUS_DIR

    @property
    def stop_request(self) -> Path:  # the evaluator creates it on StopTraining
        return self.root / "stop_request"

    @property
    def watcher_pid(self) -> Path:
        return self.root / "watcher.pid"

    @property
    def watcher_log(self) -> Path:
        return self.root / "watcher.log"

    @property
    def evaluator_log(self) -> Path:
        return self.root / "evaluator.log"

    @property
    def progress(self) -> Path:  # written by the watcher from the store's losses
        return self.root / PROGRESS_FILE

    @property
    def metrics(self) -> Path:  # one step record per loss the store holds
        return self.root / METRICS_FILE

    @property
    def job_reports(self) -> Path:  # what the job sent to <prefix>/remedy/ (reports.py)
        return self.root / "job"

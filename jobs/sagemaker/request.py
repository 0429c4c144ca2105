"""The CreateTrainingJob request for a run_spec, as the cloud SDK's PyTorch estimator builds
it in script mode, checked against the service's model (service_model.py).

- HyperParameters: the job's hyperparameters JSON-encoded (the SDK's json.dumps: "0.1",
  "\\"adam\\"", "true"), plus the toolkit's sagemaker_program (remedy's entry program, which
  runs run_spec.entry_point: container_entry.py), sagemaker_submit_directory (the packed
  source), sagemaker_container_log_level, sagemaker_job_name, sagemaker_region and, with
  run_spec.distribution, sagemaker_torch_distributed_enabled.
- Environment: the job contract's variables, pointing at the container's folders and the
  bucket (REMEDY_DEBUGGER_CONFIG switches the tensor store on), and REMEDY_COMMAND_LINE, how
  the entry program renders a script's flags (hyperparameter_style, arguments, bare_flags:
  HyperParameters is a map and cannot say it). The flags of the output_dir and resume roles
  hold the container's model folder and the warm start's restored checkpoint.
- CheckpointConfig always (warm start, spot interruptions; the built-in job's
  init_checkpoint is the copy of the checkpoint the service restores into the container);
  StoppingCondition from run_spec.sagemaker.max_run_s (and max_wait_s with
  spot); the managed
  debugger is not asked for.
"""

from __future__ import annotations

import json
from typing import Any

from remedy.jobs.sagemaker.images import training_image
from remedy.jobs.sagemaker.layout import (
    CHECKPOINT_DIR,
    CODE_DIR,
    DEBUGGER_CONFIG,
    OUTPUT_DIR,
    CloudPaths,
    warm_start_folder,
)
from remedy.jobs.sagemaker.service_model import check_request
from remedy.jobs.sagemaker.source import ENTRY_PROGRAM
from remedy.state_schema import RunSpec
from remedy.state_schema import job_env as names
from remedy.state_schema.sagemaker_spec import SageMakerSpec

CREATE = "CreateTrainingJob"
CONTAINER_LOG_LEVEL = "20"  # logging.INFO, the SDK's default
# Hyperparameters the toolkit reads itself; a script's own flag may not take these names.
TOOLKIT_PREFIX = "sagemaker_"
COMMAND_LINE_ENV = "REMEDY_COMMAND_LINE"  # read by container_entry.py
MODEL_DIR = "/opt/ml/model"  # SM_MODEL_DIR in the container, uploaded at the end


def sagemaker_of(spec: RunSpec) -> SageMakerSpec:
    """The run's cloud fields (run_spec.sagemaker; the defaults when it gives none)."""
    return spec.sagemaker or SageMakerSpec()


def encoded_hyperparameters(values: dict[str, Any]) -> dict[str, str]:
    """The SDK's encoding: every value JSON, so the toolkit decodes the type back."""
    clashes = sorted(name for name in values if name.startswith(TOOLKIT_PREFIX))
    if clashes:
        raise ValueError(f"hyperparameters: {', '.join(clashes)}: names the toolkit keeps")
    return {name: json.dumps(value) for name, value in values.items()}


def job_environment(spec: RunSpec, paths: CloudPaths) -> dict[str, str]:
    restored = warm_start_folder(spec.init_checkpoint) if spec.init_checkpoint else None
    edits = spec.config_edits(output_dir=MODEL_DIR, resume=restored)
    return {
        names.DEBUGGER_CONFIG_ENV: f"{CODE_DIR}/{DEBUGGER_CONFIG}",
        names.OUTPUT_DIR_ENV: OUTPUT_DIR,
        names.CHECKPOINT_DIR_ENV: CHECKPOINT_DIR,
        names.RULE_STATUS_DIR_ENV: f"{OUTPUT_DIR}/{names.RULE_STATUS_DIR}",
        names.STOP_FILE_ENV: f"{OUTPUT_DIR}/stop_request",  # the NaN guard's, in the job
        names.NAN_GUARD_ENV: spec.nan_guard,
        **({names.MAX_UPDATES_ENV: str(spec.max_updates)} if spec.max_updates else {}),
        **({names.CONFIG_EDITS_ENV: json.dumps(edits)} if edits else {}),
        "REMEDY_ENTRY_POINT": spec.entry_point,
        COMMAND_LINE_ENV: json.dumps(
            {
                "hyperparameter_style": spec.hyperparameter_style,
                "arguments": spec.arguments,
                "bare_flags": spec.bare_flags,
            }
        ),
        "REMEDY_REPORT_URI": paths.reports,
        "PYTHONUNBUFFERED": "1",
    }


def create_training_job_request(spec: RunSpec, paths: CloudPaths, region: str) -> dict[str, Any]:
    """The request; RequestError when the service's model refuses it, naming the member."""
    cloud = sagemaker_of(spec)
    assert cloud.bucket and cloud.sm_role and cloud.instance_type  # the preflight's business
    restored = warm_start_folder(spec.init_checkpoint) if spec.init_checkpoint else None
    values = spec.job_hyperparameters(output_dir=MODEL_DIR, resume=restored)
    hyperparameters = encoded_hyperparameters(values)
    hyperparameters |= {
        "sagemaker_program": json.dumps(ENTRY_PROGRAM),
        "sagemaker_submit_directory": json.dumps(paths.source),
        "sagemaker_container_log_level": CONTAINER_LOG_LEVEL,
        "sagemaker_job_name": json.dumps(paths.training_job_name),
        "sagemaker_region": json.dumps(region),
    }
    if spec.distribution is not None and spec.distribution.enabled:
        hyperparameters["sagemaker_torch_distributed_enabled"] = "true"
    algorithm: dict[str, Any] = {
        "TrainingImage": training_image(cloud.image_uri, region, cloud.instance_type),
        "TrainingInputMode": "File",
        "EnableSageMakerMetricsTimeSeries": bool(spec.metric_definitions),
    }
    if spec.metric_definitions:
        algorithm["MetricDefinitions"] = [
            {"Name": d.name, "Regex": d.regex} for d in spec.metric_definitions
        ]
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": cloud.max_run_s}
    if cloud.spot:
        stopping["MaxWaitTimeInSeconds"] = cloud.max_wait_s or cloud.max_run_s
    request: dict[str, Any] = {
        "TrainingJobName": paths.training_job_name,
        "HyperParameters": hyperparameters,
        "AlgorithmSpecification": algorithm,
        "RoleArn": cloud.sm_role,
        "OutputDataConfig": {"S3OutputPath": paths.output},
        "ResourceConfig": {
            "InstanceType": cloud.instance_type,
            "InstanceCount": cloud.instance_count,
            "VolumeSizeInGB": cloud.volume_size_gb,
        },
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": cloud.spot,
        "CheckpointConfig": {"S3Uri": paths.checkpoints, "LocalPath": CHECKPOINT_DIR},
        "Environment": job_environment(spec, paths),
        "Tags": [{"Key": "remedy:job", "Value": paths.training_job_name}],
    }
    check_request(CREATE, request)
    return request

"""run_spec.sagemaker: the cloud training service's fields (the sagemaker backend).

The original workflow's payloads give them at the top of run_spec (sm_role, bucket, region,
instance_type); RunSpec still reads them there (see LEGACY_FIELDS in run_spec.py) and
writes them here. The shapes are checked here; the backend's check
(jobs/sagemaker/checks.py) adds what needs the service's model or the rest of the spec.
"""

from __future__ import annotations

from typing import Self

from pydantic import ConfigDict, Field, model_validator

from remedy.state_schema.base import Strict


class SageMakerSpec(Strict):
    """The training job each attempt is: its role, bucket, region, instances and limits."""

    model_config = ConfigDict(title="SageMaker")  # the name the run form's toggle shows

    sm_role: str | None = Field(
        None,
        description="Execution role ARN. Leave empty: REMEDY_SM_ROLE of the machine running "
        "the flow (a value given here shows as <hidden> once the run starts).",
    )
    bucket: str | None = Field(
        None,
        description="Bucket for outputs. Leave empty: REMEDY_BUCKET of the machine running "
        "the flow (a value given here shows as <hidden> once the run starts).",
    )
    region: str | None = Field(None, description="The service's region.")
    instance_type: str | None = Field(None, description="Instance type, e.g. ml.g5.xlarge.")
    image_uri: str | None = Field(
        None,
        max_length=255,
        description="The training image. null: the PyTorch training image of the region "
        "(CPU or GPU after instance_type); your own needs remedy-train installed for capture.",
    )
    instance_count: int = Field(1, ge=1, le=100, description="Instances per job.")
    volume_size_gb: int = Field(30, ge=1, le=16384, description="Disk per instance.")
    max_run_s: int = Field(
        86400, ge=1, le=28 * 86400, description="A job is stopped after this long."
    )
    spot: bool = Field(
        False,
        description="Managed spot training (interruptions resume from the job's checkpoints).",
    )
    max_wait_s: int | None = Field(
        None,
        title="Spot Max Wait (s)",  # apart from the monitor's max_wait_s in the same form
        ge=1,
        le=28 * 86400,
        description="Spot: the longest a job may wait for capacity and run, at least "
        "max_run_s. null: max_run_s.",
    )

    @model_validator(mode="after")
    def _spot_wait(self) -> Self:
        if self.max_wait_s is not None and self.max_wait_s < self.max_run_s:
            raise ValueError(
                f"max_wait_s ({self.max_wait_s}) must be at least max_run_s ({self.max_run_s})"
            )
        return self

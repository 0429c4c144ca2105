"""A cloud job's run_spec checked before anything is created: the fields it needs, an
instance type and region the service knows (botocore's model and endpoint data), the image,
the code, and the whole CreateTrainingJob request against the service's model (the
hyperparameter and environment limits included). Run by `remedy run`'s preflight and by
every flow run (a deployment's too) before its first launch. Messages name the field and
never quote the role or the bucket.
"""

from __future__ import annotations

import difflib
import re

from remedy.jobs.sagemaker.images import ImageError, training_image
from remedy.jobs.sagemaker.layout import CloudPaths
from remedy.jobs.sagemaker.request import create_training_job_request, sagemaker_of
from remedy.jobs.sagemaker.service_model import RequestError, instance_types
from remedy.jobs.sagemaker.source import SourceError, source_files
from remedy.state_schema import RunSpec

REQUIRED = ("sm_role", "bucket", "region", "instance_type")
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class CloudSpecError(ValueError):
    """A run_spec the sagemaker backend cannot launch; the message names the field."""


def check_cloud_spec(spec: RunSpec) -> None:
    cloud = sagemaker_of(spec)
    missing = [name for name in REQUIRED if not getattr(cloud, name)]
    if missing:
        raise CloudSpecError(
            f"run_spec.sagemaker: the sagemaker backend needs {', '.join(missing)} (see "
            "docs/cloud.md; sm_role and bucket may instead be REMEDY_SM_ROLE and REMEDY_BUCKET)"
        )
    assert cloud.instance_type and cloud.region and cloud.bucket
    known = instance_types()
    if cloud.instance_type not in known:
        close = difflib.get_close_matches(cloud.instance_type, known, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise CloudSpecError(
            f"run_spec.sagemaker.instance_type: {cloud.instance_type!r} is not a training "
            f"instance type of the service{hint}"
        )
    regions = cloud_regions()
    if regions and cloud.region not in regions:
        close = difflib.get_close_matches(cloud.region, regions, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise CloudSpecError(
            f"run_spec.sagemaker.region: the service has no region {cloud.region!r}{hint}"
        )
    if not BUCKET_NAME.fullmatch(cloud.bucket) or ".." in cloud.bucket:
        raise CloudSpecError(
            "run_spec.sagemaker.bucket: not a bucket name (3-63 of a-z, 0-9, '.', '-')"
        )
    try:
        training_image(cloud.image_uri, cloud.region, cloud.instance_type)
        list(source_files(spec))
    except (ImageError, SourceError) as error:
        raise CloudSpecError(str(error)) from None
    if spec.init_checkpoint and not spec.init_checkpoint.startswith("s3://"):
        raise CloudSpecError(
            "run_spec.init_checkpoint: a cloud job warm-starts from a checkpoint in the "
            "bucket (an s3:// folder a job wrote)"
        )
    try:
        paths = CloudPaths(cloud.bucket, "preflight-check")
        create_training_job_request(spec, paths, cloud.region)
    except (RequestError, ValueError) as error:
        raise CloudSpecError(f"run_spec: the service would refuse the job: {error}") from None


def cloud_regions() -> list[str]:
    """The service's regions in botocore's endpoint data (all partitions)."""
    import boto3

    session = boto3.session.Session()
    found: list[str] = []
    for partition in session.get_available_partitions():
        found += session.get_available_regions("sagemaker", partition_name=partition)
    return sorted(set(found))

"""boto3 clients for a job's region, with credentials from boto3's usual chain
(environment, shared profile, instance or container role): remedy never reads or stores
them. AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_<SERVICE>) point them at another endpoint, as
for any boto3 client."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def client(service: str, region: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 5})
    return boto3.session.Session(region_name=region).client(service, config=config)


def sagemaker(region: str) -> Any:
    return client("sagemaker", region)


def s3(region: str) -> Any:
    return client("s3", region)


def logs(region: str) -> Any:
    return client("logs", region)

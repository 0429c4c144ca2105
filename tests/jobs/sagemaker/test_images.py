"""The framework images remedy names are the ones the cloud SDK publishes: the registry
account of every region, the repository, version, Python and processors, pinned to an
excerpt of the SDK's image_uri_config/pytorch.json (data/pytorch_training_2.5.1.json names
the commit it was copied from)."""

from __future__ import annotations

import json
from pathlib import Path

from remedy.jobs.sagemaker import images

PUBLISHED = json.loads((Path(__file__).parent / "data/pytorch_training_2.5.1.json").read_text())


def test_every_region_names_the_registry_account_the_sdk_publishes() -> None:
    assert images.REGISTRY_ACCOUNTS == PUBLISHED["registries"]


def test_repository_version_python_and_processors_are_the_sdks() -> None:
    assert images.DEFAULT_FRAMEWORK_VERSION == PUBLISHED["version"]
    assert images.DEFAULT_PY_VERSION in PUBLISHED["py_versions"]
    assert images.REPOSITORY == PUBLISHED["repository"]
    for region, account in PUBLISHED["registries"].items():
        for instance_type, processor in (("ml.g5.xlarge", "gpu"), ("ml.m5.large", "cpu")):
            assert processor in PUBLISHED["processors"]
            domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
            assert images.pytorch_training_image(region, instance_type) == (
                f"{account}.dkr.ecr.{region}.{domain}/pytorch-training:2.5.1-{processor}-py311"
            )

"""The framework image a job runs in: the PyTorch training image of the job's region (the
cloud SDK's `image_uris.retrieve("pytorch", region, version, py_version, instance_type,
image_scope="training")`), or the user's own (run_spec.sagemaker.image_uri).

The training images live in a registry account per region (763104351884 in most); a region
the SDK lists no image for needs run_spec.sagemaker.image_uri.
"""

from __future__ import annotations

DEFAULT_FRAMEWORK_VERSION = "2.5.1"
DEFAULT_PY_VERSION = "py311"
REPOSITORY = "pytorch-training"
# The PyTorch training images' registry account per region, as the cloud SDK publishes it
# (image_uri_config/pytorch.json, training 2.5.1; tests/jobs/sagemaker/test_images.py pins
# this table to that file).
REGISTRY_ACCOUNTS = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-south-2": "772153158452",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": "763104351884",
    "eu-central-2": "380420809688",
    "eu-north-1": "763104351884",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "mx-central-1": "637423239942",
    "sa-east-1": "763104351884",
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-gov-east-1": "446045086412",
    "us-gov-west-1": "442386744353",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
}
# Instance families with NVIDIA GPUs: the gpu image; every other family the cpu one.
GPU_FAMILIES = ("p2", "p3", "p4", "p5", "p6", "g4", "g5", "g6", "gr6")
# Accelerators the PyTorch image cannot drive (Trainium, Inferentia): an image_uri is needed.
OTHER_ACCELERATORS = ("trn", "inf")


class ImageError(ValueError):
    pass


def instance_family(instance_type: str) -> str:
    """ml.g5.xlarge -> g5."""
    return instance_type.removeprefix("ml.").split(".", 1)[0]


def processor(instance_type: str) -> str:
    family = instance_family(instance_type)
    if family.startswith(OTHER_ACCELERATORS):
        raise ImageError(
            f"run_spec.sagemaker.instance_type {instance_type}: the PyTorch training image "
            "does not run on this accelerator; set run_spec.sagemaker.image_uri to an image "
            "that does"
        )
    return "gpu" if family.startswith(GPU_FAMILIES) else "cpu"


def registry_account(region: str) -> str:
    if region in REGISTRY_ACCOUNTS:
        return REGISTRY_ACCOUNTS[region]
    raise ImageError(
        f"run_spec.sagemaker.region {region}: remedy does not know the PyTorch training "
        "image's registry there; set run_spec.sagemaker.image_uri"
    )


def pytorch_training_image(
    region: str,
    instance_type: str,
    version: str = DEFAULT_FRAMEWORK_VERSION,
    py_version: str = DEFAULT_PY_VERSION,
) -> str:
    """e.g. 763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311"""
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    account = registry_account(region)
    tag = f"{version}-{processor(instance_type)}-{py_version}"
    return f"{account}.dkr.ecr.{region}.{domain}/{REPOSITORY}:{tag}"


def training_image(image_uri: str | None, region: str, instance_type: str) -> str:
    return image_uri or pytorch_training_image(region, instance_type)

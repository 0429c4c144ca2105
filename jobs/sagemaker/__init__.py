"""The cloud training service's backend (run_spec.backend "sagemaker"); docs/cloud.md."""

from remedy.jobs.sagemaker.backend import SageMakerBackend

__all__ = ["SageMakerBackend"]

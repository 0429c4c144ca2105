"""Torch models for remedy. Stands alone: imports nothing else of ours."""

from remedy.models.resnet import ACTIVATIONS, ResNet, ResNetConfig, build_model, make_activation

__all__ = ["ACTIVATIONS", "ResNet", "ResNetConfig", "build_model", "make_activation"]

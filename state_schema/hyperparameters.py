"""The training contract: every hyperparameter the built-in training job receives.

One model serves both sides. RunSpec (models.py) is this contract plus what only the backends
and the flow read; the job (remedy.training.train) validates the file it is given with this
model, so a field, its bounds and its description are written once.

Values may arrive as text: the cloud training service passes every hyperparameter as a
string ("0.1", "5", "[1, 2]", "true", "null"). A string given for a field whose type is not
text is decoded as JSON first, and "null" is None wherever None is allowed; a string that does
not decode is left as it is, and pydantic's error then names the field.
"""

from __future__ import annotations

import json
import re
import types
import typing
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from remedy.state_schema.base import Strict

# The synthetic dataset's size when train_samples / test_samples are not given.
SYNTHETIC_TRAIN_SAMPLES = 5000
SYNTHETIC_TEST_SAMPLES = 1000
BUILTIN_NUM_CLASSES = 10  # the built-in job's datasets: CIFAR-10 and the synthetic images
MAX_SAMPLES = 10_000_000  # 120 GB of 32x32 RGB float images: more is a typo


class Activation(StrEnum):
    elu = "elu"
    relu = "relu"
    leaky_relu = "leaky_relu"
    selu = "selu"
    tanh = "tanh"


def takes_text(annotation: Any) -> bool:
    """True when a string is a value of this type (str, a string enum or literal), rather
    than the text encoding of a number, list or null."""
    if isinstance(annotation, type):
        return issubclass(annotation, str)
    arguments = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(argument, str) for argument in arguments)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(takes_text(argument) for argument in arguments)
    return False


def takes_none(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def is_number(annotation: Any) -> bool:
    """int or float, alone or with None."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        options = [option for option in typing.get_args(annotation) if option is not type(None)]
        return all(option in (int, float) for option in options)
    return annotation in (int, float)


def _zero_or_one(schema: dict[str, Any]) -> None:
    """0 or 1 in the JSON Schema as an integer from 0 to 1, not an enum: the Prefect UI's
    dropdown (3.8) shows an integer choice of 0 as blank, so the run form's default of 0
    was invisible; its number input shows it. The model still takes exactly 0 or 1."""
    schema.pop("enum", None)
    schema.update(type="integer", minimum=0, maximum=1)


class StepWindow(Strict):
    """Updates first..last (counted from 1, both included)."""

    first: int = Field(ge=1, le=10**12)
    last: int = Field(ge=1, le=10**12)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.last < self.first:
            raise ValueError(f"last ({self.last}) is before first ({self.first})")
        return self

    def __contains__(self, step: int) -> bool:
        return self.first <= step <= self.last


class Hyperparameters(Strict):
    """The hyperparameters of the built-in job; defaults are the original workflow's seed."""

    # Infinity and NaN decode from JSON text ("Infinity", "NaN") but are never a setting.
    model_config = ConfigDict(allow_inf_nan=False)

    # --- fields of the original run_spec -------------------------------------------
    base_job_name: str = Field(
        "complex-resnet-model",
        description="Job names are this plus a launch timestamp. Not given: a script's own "
        "name (fit.py: fit), else the seed's complex-resnet-model.",
    )
    warmup_learning_rate: float = Field(0.1, gt=0, description="Learning rate of epoch 0.")
    learning_rate: float = Field(0.1, gt=0, description="Learning rate after the warmup epoch.")
    add_batch_norm: Literal[0, 1] = Field(
        0,
        description="1 adds batch norm before each residual addition; 0: none.",
        json_schema_extra=_zero_or_one,
    )
    num_epochs: int = Field(5, gt=0, le=100_000, description="Epochs to train.")

    # --- ours ----------------------------------------------------------------------
    # Upper bounds: beyond them a value is a typo that would only exhaust memory.
    depth: int = Field(
        20, ge=8, le=2000, description="ResNet depth, 6n+2 (20, 32, 44, 56, ..., 1202)."
    )
    width: int = Field(16, gt=0, le=1024, description="Filters of the first stack (then x2, x4).")
    activation: Activation = Field(Activation.elu, description="Activation in every block.")
    batch_size: int = Field(128, gt=0, le=1_000_000, description="Mini-batch size.")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum.")
    weight_decay: float = Field(
        2e-4, ge=0, description="SGD weight decay; 2e-4 equals the reference's Keras L2 of 1e-4."
    )
    dataset: Literal["synthetic", "cifar10"] = Field(
        "synthetic", description="synthetic: built-in learnable images; cifar10: python batches."
    )
    data_path: str | None = Field(
        None, description="Folder holding CIFAR-10's python batches (data_batch_1..5, test_batch)."
    )
    train_samples: int | None = Field(
        None,
        gt=0,
        le=MAX_SAMPLES,
        description=f"Use only this many training images (synthetic default "
        f"{SYNTHETIC_TRAIN_SAMPLES}).",
    )
    test_samples: int | None = Field(
        None,
        gt=0,
        le=MAX_SAMPLES,
        description=f"Use only this many test images (synthetic default {SYNTHETIC_TEST_SAMPLES}).",
    )
    seed: int = Field(
        0, ge=0, lt=2**63, description="Seed for data order, initialisation and synthetic data."
    )
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto",
        description="Where the job trains: auto = the first visible CUDA GPU when there is "
        "one, else the CPU; cuda: a GPU or fail at start.",
    )
    checkpoint_every_epochs: int = Field(
        1, ge=0, description="Checkpoint every this many epochs; 0: never."
    )
    checkpoint_every_steps: int = Field(
        0,
        ge=0,
        le=10**9,
        description="Also checkpoint every this many updates, mid-epoch too (a late failure "
        "then loses at most this many); 0: at epoch ends only.",
    )
    keep_checkpoints: int = Field(
        3, ge=1, le=1000, description="How many of the most recent step checkpoints are kept."
    )
    nan_guard: Literal["off", "stop", "skip"] = Field(
        "stop",
        description="Check loss and gradients before each update; on a non-finite value skip "
        "it and: stop with a repro bundle (stop), count and go on (skip); off: no check.",
    )
    exclude_samples: list[Annotated[int, Field(ge=0, lt=MAX_SAMPLES)]] = Field(
        default_factory=list, description="Training sample ids left out (bad records)."
    )
    skip_steps: list[StepWindow] = Field(
        default_factory=list,
        description="Updates whose batches are drawn but not trained on (a rollback "
        "skipping the data around a loss spike): the data order of later steps is kept.",
    )
    # --- hyperparameters the remediation strategies change (defaults = the seed's) -----
    optimizer: Literal["sgd", "momentum", "adam", "adamw"] = Field(
        "momentum", description="sgd: plain SGD; momentum: SGD with `momentum`; adam; adamw."
    )
    init: Literal["he_normal", "lecun_normal", "xavier_uniform", "orthogonal"] = Field(
        "he_normal", description="Initialisation of conv and dense weights."
    )
    grad_clip_norm: float | None = Field(
        None, gt=0, description="Clip the total gradient norm to this; null: no clipping."
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout before the dense head.")
    warmup_epochs: int = Field(
        1, ge=0, description="Epochs trained at warmup_learning_rate (the seed: 1)."
    )
    # --- warm start: set by the planner when a strategy keeps the architecture ---------
    init_checkpoint: str | None = Field(
        None, description="Checkpoint folder to start from (model, and optimizer if it fits)."
    )
    start_epoch: int = Field(0, ge=0, description="First epoch to train (the checkpoint's).")

    @field_validator("*", mode="before")
    @classmethod
    def _decode_text(cls, value: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None  # a field validator always has its field
        annotation = cls.model_fields[info.field_name].annotation
        if value == "null" and takes_none(annotation):
            return None  # a text field that may be null (data_path): JSON's null, not a name
        if isinstance(value, str) and not takes_text(annotation):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return value  # pydantic's error below names the field and shows the text
        # pydantic's lax mode reads true as 1; as a count or a rate it is a mistake.
        # (add_batch_norm is Literal[0, 1], not a number: true/false say 1/0 there.)
        if isinstance(value, bool) and is_number(annotation):
            raise ValueError(f"must be a number, got {json.dumps(value)}")
        return value

    @field_validator("depth")
    @classmethod
    def _depth_is_6n_plus_2(cls, depth: int) -> int:
        if (depth - 2) % 6:
            raise ValueError(f"depth must be 6n+2 (20, 32, 44, ...), got {depth}")
        return depth

    @field_validator("base_job_name")
    @classmethod
    def _job_name_chars(cls, name: str) -> str:
        # Job names become folder names and cloud job names (max 63, [a-zA-Z0-9-]).
        if not re.fullmatch(r"[A-Za-z0-9](-*[A-Za-z0-9])*", name) or len(name) > 40:
            raise ValueError(
                f"base_job_name must be letters, digits and single dashes, at most 40 "
                f"characters, got {name!r}"
            )
        return name

    @model_validator(mode="after")
    def _dataset_needs_path(self) -> Self:
        if self.dataset == "cifar10" and not self.data_path:
            raise ValueError("data_path is required when dataset is 'cifar10'")
        return self

    @property
    def num_train_samples(self) -> int | None:
        """Training images to use; None: all of the dataset's."""
        if self.train_samples is None and self.dataset == "synthetic":
            return SYNTHETIC_TRAIN_SAMPLES
        return self.train_samples

    @property
    def steps_per_epoch(self) -> int | None:
        """Updates per epoch of the built-in job (the last batch may be short); None: the
        dataset's size is not known here (all of CIFAR-10's)."""
        samples = self.num_train_samples
        return None if samples is None else -(-samples // self.batch_size)

    @property
    def num_test_samples(self) -> int | None:
        """Test images to use; None: all of the dataset's."""
        if self.test_samples is None and self.dataset == "synthetic":
            return SYNTHETIC_TEST_SAMPLES
        return self.test_samples

    def hyperparameters(self) -> dict[str, Any]:
        """What the training job receives, as JSON values: exactly the contract's fields
        (on a RunSpec: none of the backend's fields, so no secrets)."""
        return self.model_dump(mode="json", include=set(Hyperparameters.model_fields))
